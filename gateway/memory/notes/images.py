"""Images kept in memory: the picture plus a markdown sidecar that makes it findable by its description.

    memory/images/<key>.png | <key>.jpg     the image, exactly the bytes given (0600)
    memory/images/<key>.md                  the sidecar, indexed like any memory file:

    ---
    key: receipt-2026-11
    mimeType: image/png
    file: receipt-2026-11.png
    bytes: 48213
    sha256: …
    created: 2026-11-22T10:00:00.000Z
    updated: 2026-11-22T10:00:00.000Z
    ---
    # Image receipt-2026-11

    ![receipt-2026-11](receipt-2026-11.png)

    Hotel receipt from the Lisbon trip.

Input is checked before anything is written: base64 (standard alphabet, padding required; a
`data:image/…;base64,` prefix and whitespace are allowed), the decoded size (`memory.imageMaxBytes`),
and the type by its magic bytes (PNG or JPEG only; the declared type is never trusted). The image is
written first and the sidecar last, both atomically. Replacing an image without a description keeps
the one it had; `""` clears it. Keys follow the keyed-memory pattern. Blocking:
call from a thread.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from pathlib import Path

from ...errors import Invalid, NotFound
from ...timeutil import now_iso
from ...fsutil import atomic_write, locked, remove
from ..layout import IMAGES_DIR
from .frontmatter import front_matter, parse_front_matter
from .keyed import KEY_PATTERN, check_key

TYPES = {"image/png": "png", "image/jpeg": "jpg"}
MAX_DESCRIPTION = 4000


def sniff(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    return None


def decode_image(text: str, max_bytes: int, field: str = "image") -> tuple[bytes, str]:
    """(bytes, mimeType) of a base64 PNG/JPEG, or Invalid naming the rule that failed."""
    if not isinstance(text, str) or not text:
        raise Invalid("must be a non-empty base64 string", field=field)
    m = re.match(r"data:([\w.+-]+/[\w.+-]+);base64,", text[:100])
    if m:
        text = text[m.end() :]
    compact = re.sub(r"\s+", "", text)
    if len(compact) // 4 * 3 > max_bytes + 3:
        raise Invalid(
            f"image too large: about {len(compact) // 4 * 3} bytes decoded, at most {max_bytes} (memory.imageMaxBytes)",
            field=field,
            data={"maxBytes": max_bytes},
        )
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Invalid(f"not valid base64 ({exc})", field=field) from None
    if not data:
        raise Invalid("decodes to no bytes", field=field)
    if len(data) > max_bytes:
        raise Invalid(
            f"image too large: {len(data)} bytes decoded, at most {max_bytes} (memory.imageMaxBytes)",
            field=field,
            data={"maxBytes": max_bytes},
        )
    mime = sniff(data)
    if mime is None:
        raise Invalid(
            "not a PNG or JPEG image (checked by its first bytes); only PNG and JPEG are accepted", field=field
        )
    return data, mime


class ImageStore:
    def __init__(self, workspace: Path):
        self.workspace = workspace
        self.root = workspace / IMAGES_DIR

    def _sidecar(self, key: str) -> Path:
        return self.root / f"{key}.md"

    def set(self, key: str, data: bytes, mime: str, description: str | None) -> dict:
        check_key(key)
        if description is not None and len(description.strip()) > MAX_DESCRIPTION:
            raise Invalid(f"must be at most {MAX_DESCRIPTION} characters", field="description")
        ext = TYPES[mime]
        with locked(self._sidecar(key)):
            old = self._read_meta(key)
            # No description given: a replaced image keeps the one it had ("" clears it).
            description = (old or {}).get("description", "") if description is None else description.strip()
            now = now_iso()
            created = old.get("created") or now if old else now
            fname = f"{key}.{ext}"
            atomic_write(self.root / fname, data)
            for other in TYPES.values():
                if other != ext:
                    remove(self.root / f"{key}.{other}")
            meta = {
                "key": key,
                "mimeType": mime,
                "file": fname,
                "bytes": str(len(data)),
                "sha256": hashlib.sha256(data).hexdigest(),
                "created": created,
                "updated": now,
            }
            body = f"# Image {key}\n\n![{key}]({fname})\n"
            if description:
                body += f"\n{description}\n"
            atomic_write(self._sidecar(key), (front_matter(meta) + body).encode("utf-8"))
        return {
            "key": key,
            "mimeType": mime,
            "bytes": len(data),
            "path": f"{IMAGES_DIR}/{key}.md",
            "imagePath": f"{IMAGES_DIR}/{fname}",
            "description": description,
            "created": created,
            "updated": now,
            "replaced": bool(old),
        }

    def _read_meta(self, key: str) -> dict[str, str] | None:
        p = self._sidecar(key)
        if not p.is_file() or p.is_symlink():
            return None
        meta, body = parse_front_matter(p.read_text(encoding="utf-8", errors="replace"))
        meta["description"] = _description(key, body)
        return meta

    def _load(self, key: str) -> tuple[bytes, str, str, dict[str, str]] | None:
        """(bytes, MIME type, file name, sidecar metadata) of a stored image, or None."""
        meta = self._read_meta(key) or {}
        candidates = [meta.get("file", "")] + [f"{key}.{e}" for e in TYPES.values()]
        for fname in candidates:
            if not fname or fname not in (f"{key}.{e}" for e in TYPES.values()):
                continue
            p = self.root / fname
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                mime = sniff(data)
                if mime is not None:
                    return data, mime, fname, meta
        return None

    def _summary(self, key: str, mime: str, fname: str, meta: dict[str, str], size: int) -> dict:
        return {
            "key": key,
            "mimeType": mime,
            "description": meta.get("description", ""),
            "bytes": size,
            "path": f"{IMAGES_DIR}/{key}.md",
            "imagePath": f"{IMAGES_DIR}/{fname}",
            "created": meta.get("created"),
            "updated": meta.get("updated"),
        }

    def get(self, key: str) -> dict:
        check_key(key)
        found = self._load(key)
        if found is None:
            raise NotFound(f"no image with key {key!r}", {"key": key})
        data, mime, fname, meta = found
        return {**self._summary(key, mime, fname, meta, len(data)), "image": base64.b64encode(data).decode("ascii")}

    def all(self) -> list[tuple[dict, bytes]]:
        """(summary, bytes) of every stored image, by key."""
        out = []
        for sidecar in sorted(self.root.glob("*.md")) if self.root.is_dir() else []:
            key = sidecar.stem
            found = self._load(key) if re.fullmatch(KEY_PATTERN, key) else None
            if found is not None:
                data, mime, fname, meta = found
                out.append((self._summary(key, mime, fname, meta, len(data)), data))
        return out


def _description(key: str, body: str) -> str:
    lines = body.strip("\n").splitlines()
    out = [ln for ln in lines if ln.strip() != f"# Image {key}" and not re.fullmatch(r"\s*!\[[^\]]*\]\([^)]*\)\s*", ln)]
    return "\n".join(out).strip("\n")
