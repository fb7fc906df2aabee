// Small helpers every module of the viewer shares.

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// Seconds as people read them: "12 ms", "1.25 s", "42.0 s".
export function formatSeconds(s) {
  if (typeof s !== "number" || Number.isNaN(s)) return "";
  if (s < 1) return `${Math.max(0, Math.round(s * 1000))} ms`;
  return `${s.toFixed(s < 10 ? 2 : 1)} s`;
}
