"""`openai`: the `/embeddings` endpoint of any OpenAI-compatible server (OpenAI, Ollama, vLLM, …).

Requests carry up to `batchSize` texts. Retries are ours and bounded (`maxRetries`): connection errors,
timeouts, 408/409/429 and 5xx are retried with exponential backoff, honouring `Retry-After` /
`retry-after-ms` when the server sends one (up to MAX_WAIT seconds; a longer wait is reported to the
caller instead, who retries the missing vectors later).
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import time
from typing import Any

import numpy as np

from ...neterrors import connection_failure
from .base import EmbeddingError, EmbeddingProvider, normalise

DEFAULT_MODEL = "text-embedding-3-small"
KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
MAX_WAIT = 20.0


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(ra)
        return max(0.0, dt.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class OpenAIEmbeddings(EmbeddingProvider):
    name = "openai"
    remote = True
    max_chars = 24000

    def __init__(
        self,
        *,
        model: str = "",
        dims: int = 0,
        api_key: str = "",
        base_url: str = "",
        timeout: float = 30.0,
        max_retries: int = 2,
        batch_size: int = 64,
        multimodal: bool = False,
    ) -> None:
        import openai

        if not api_key and not base_url:
            raise ValueError(
                "memory.embeddings: the openai provider needs an API key or a base URL "
                "(memory.embeddings.apiKey / baseUrl, or chat.apiKey / OPENAI_API_KEY)"
            )
        self._openai = openai
        self.model = model or DEFAULT_MODEL
        self.requested_dims = dims
        self.dims = dims or KNOWN_DIMS.get(self.model, 0)
        self.max_batch = batch_size
        self.max_retries = max_retries
        self.multimodal = multimodal
        self.endpoint = (base_url or "https://api.openai.com/v1").rstrip("/")
        self.client = openai.AsyncOpenAI(
            api_key=api_key or "unused", base_url=base_url or None, timeout=timeout, max_retries=0
        )

    async def close(self) -> None:
        await self.client.close()

    async def _request(self, texts: list[Any]) -> np.ndarray:
        kwargs: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.requested_dims:
            kwargs["dimensions"] = self.requested_dims
        resp = await self.client.embeddings.create(**kwargs)
        data = sorted(resp.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise EmbeddingError(f"embedding server returned {len(data)} vectors for {len(texts)} texts")
        return normalise([d.embedding for d in data], f"embedding provider openai ({self.model} at {self.endpoint})")

    async def _with_retries(self, texts: list[Any]) -> np.ndarray:
        oa = self._openai
        attempt = 0
        while True:
            wait: float | None = None
            try:
                return await self._request(texts)
            except oa.APIStatusError as exc:
                status = exc.status_code
                retryable = status in (408, 409, 429) or status >= 500
                wait = retry_after_seconds(getattr(exc.response, "headers", None))
                err = EmbeddingError(f"embedding request to {self.endpoint} failed: HTTP {status}", retryable, wait)
            except oa.APIConnectionError as exc:  # includes timeouts
                retryable = True
                err = EmbeddingError(
                    f"embedding server unreachable at {self.endpoint}: {connection_failure(exc)}", True, None
                )
            except EmbeddingError:
                raise
            except oa.OpenAIError as exc:
                raise EmbeddingError(f"embedding request failed: {exc}", retryable=False) from exc
            if not retryable or attempt >= self.max_retries:
                raise err
            delay = wait if wait is not None else 0.5 * (2**attempt)
            if delay > MAX_WAIT:
                raise err
            attempt += 1
            await asyncio.sleep(delay)

    @property
    def signature_dims(self) -> int:
        return self.requested_dims

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await self._embed_inputs([t[: self.max_chars] or " " for t in texts])

    async def embed_images(self, images: list[tuple[bytes, str]]) -> np.ndarray:
        """Vectors for (bytes, MIME type) images, in the same space as the texts' (multimodal only).

        Each image goes as one input item in the chat content-part form,
        `{"type": "image_url", "image_url": {"url": "data:<mime>;base64,…"}}`."""
        if not self.multimodal:
            raise EmbeddingError(f"{self.model} is not configured as multimodal", retryable=False)
        return await self._embed_inputs(
            [
                {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}
                for data, mime in images
            ]
        )

    async def _embed_inputs(self, inputs: list[Any]) -> np.ndarray:
        if not inputs:
            return np.zeros((0, self.dims), dtype=np.float32)
        out = []
        for i in range(0, len(inputs), self.max_batch):
            out.append(await self._with_retries(inputs[i : i + self.max_batch]))
        vecs = np.vstack(out)
        if self.dims and vecs.shape[1] != self.dims and not self.requested_dims and self.model not in KNOWN_DIMS:
            raise EmbeddingError(f"embedding size changed from {self.dims} to {vecs.shape[1]}", retryable=False)
        if not self.dims:
            self.dims = int(vecs.shape[1])
        elif vecs.shape[1] != self.dims:
            raise EmbeddingError(
                f"expected {self.dims}-d embeddings from {self.model}, got {vecs.shape[1]}-d", retryable=False
            )
        return vecs
