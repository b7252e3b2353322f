// Safe, small markdown: builds DOM nodes only (never innerHTML), so message text can't inject markup.
// Supports paragraphs (single newlines kept), fenced code blocks, bullet and numbered lists,
// `inline code`, **bold**, and links to http(s) URLs only — [text](https://…) or bare https://….

const FENCE = /^\s*(```|~~~)\s*([\w+.#-]*)\s*$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;
const HEADING = /^\s*#{1,6}\s+(.*)$/;
const INLINE = /(`[^`\n]+`)|\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)|(https?:\/\/[^\s<>()"']+[^\s<>()"'.,;:!?])|\*\*([^*\n]+)\*\*/g;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A fenced block: a head with its language and a copy button (chat.js copies on its click), then the code. */
function codeBlock(text, lang) {
  const pre = el("pre", "md-code");
  const code = el("code", null, text);
  if (lang) code.dataset.lang = lang;
  pre.appendChild(code);
  const copy = el("button", "icon-button code-copy");
  copy.type = "button";
  copy.title = "Copy code";
  copy.setAttribute("aria-label", lang ? `Copy ${lang} code` : "Copy code");
  copy.appendChild(el("span", "icon icon-copy")).setAttribute("aria-hidden", "true");
  const head = el("div", "code-head");
  head.append(el("span", "code-lang", lang || "code"), copy);
  const block = el("div", "code-block");
  block.append(head, pre);
  return block;
}

export function safeHref(raw) {
  try {
    const url = new URL(raw);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch (_) {
    return null;
  }
}

function link(href, text) {
  const a = el("a", null, text);
  a.href = href;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  return a;
}

/** Append inline-formatted `text` to `parent`; newlines become <br>. */
export function appendInline(parent, text) {
  const lines = text.split("\n");
  lines.forEach((line, i) => {
    if (i > 0) parent.appendChild(document.createElement("br"));
    let last = 0;
    INLINE.lastIndex = 0;
    let m;
    while ((m = INLINE.exec(line)) !== null) {
      if (m.index > last) parent.appendChild(document.createTextNode(line.slice(last, m.index)));
      if (m[1]) {
        parent.appendChild(el("code", null, m[1].slice(1, -1)));
      } else if (m[2]) {
        const href = safeHref(m[3]);
        parent.appendChild(href ? link(href, m[2]) : document.createTextNode(m[0]));
      } else if (m[4]) {
        const href = safeHref(m[4]);
        parent.appendChild(href ? link(href, m[4]) : document.createTextNode(m[0]));
      } else if (m[5]) {
        parent.appendChild(el("strong", null, m[5]));
      }
      last = m.index + m[0].length;
    }
    if (last < line.length) parent.appendChild(document.createTextNode(line.slice(last)));
  });
}

/** Render markdown-ish `text` into a DocumentFragment. */
export function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  const lines = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
  let para = [];
  let list = null; // {node, ordered}

  const flushPara = () => {
    if (para.length) {
      const p = el("p");
      appendInline(p, para.join("\n"));
      frag.appendChild(p);
      para = [];
    }
  };
  const closeList = () => {
    list = null;
  };

  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      flushPara();
      closeList();
      const body = [];
      i += 1;
      while (i < lines.length && !new RegExp(`^\\s*${fence[1]}\\s*$`).test(lines[i])) {
        body.push(lines[i]);
        i += 1;
      }
      frag.appendChild(codeBlock(body.join("\n"), fence[2]));
      continue;
    }
    if (!line.trim()) {
      flushPara();
      closeList();
      continue;
    }
    const bullet = BULLET.exec(line);
    const numbered = bullet ? null : NUMBERED.exec(line);
    if (bullet || numbered) {
      flushPara();
      const ordered = Boolean(numbered);
      if (!list || list.ordered !== ordered) {
        const node = el(ordered ? "ol" : "ul");
        if (ordered && numbered[1] !== "1") node.start = Number(numbered[1]);
        frag.appendChild(node);
        list = { node, ordered };
      }
      const li = el("li");
      appendInline(li, ordered ? numbered[2] : bullet[1]);
      list.node.appendChild(li);
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      flushPara();
      closeList();
      const p = el("p", "md-heading");
      const strong = el("strong");
      appendInline(strong, heading[1]);
      p.appendChild(strong);
      frag.appendChild(p);
      continue;
    }
    if (list && /^\s{2,}\S/.test(line)) {
      // continuation of the last list item
      const li = list.node.lastElementChild;
      li.appendChild(document.createElement("br"));
      appendInline(li, line.trim());
      continue;
    }
    closeList();
    para.push(line);
  }
  flushPara();
  return frag;
}
