// The web IME: pinyin typed into the editor is held as a composition (not written into the text), converted by
// POST /convert with the hanzi before the cursor as context, and committed as the chosen candidate's hanzi,
// which the service learns (POST /learn): conversions from then on prefer what the user chose.
// Keys are handled one at a time, in order: a commit waits for the conversion of exactly what was typed before
// it, so fast typing ("wo xiang qu" + Space) commits what a slow typist would see.
"use strict";

const DEBOUNCE_MS = 80;     // a conversion per pause in typing, not per key
const CONTEXT_CHARS = 8;    // hanzi before the cursor sent as context (the model's window is short)
const NBEST = 5;
const HAN = /\p{Script=Han}/u;
const CHINESE_PUNCTUATION = { ",": "，", ".": "。", "?": "？", "!": "！", ";": "；", ":": "：" };
const COMPOSING_KEYS = new Set(["Backspace", "Escape", "Enter", "Tab", "ArrowUp", "ArrowDown", "ArrowLeft",
                                "ArrowRight"]);

const editor = document.getElementById("editor");
const preeditView = document.getElementById("preedit");
const candidateList = document.getElementById("candidates");
const statusView = document.getElementById("status");
const panel = document.getElementById("attention-panel");
const layerSelect = document.getElementById("layer");
const canvas = document.getElementById("attention");

let preedit = "";             // pinyin typed since the last commit
let converted = null;         // {preedit, context, candidates} of the latest finished conversion
let highlighted = 0;
let pending = Promise.resolve();  // the conversion of the current preedit (a commit waits for it)
let timer = null;
let sequence = 0;             // answers to older conversions are dropped
let attention = null;         // the latest /attention answer
let learning = Promise.resolve();  // the latest /learn (a conversion waits for it, so that it prefers what was learned)
const keyQueue = [];
let draining = false;

function busy() { return preedit !== "" || draining || keyQueue.length > 0; }

// ---------------------------------------------------------------------------------------- conversion

function contextBeforeCursor() {
  const before = Array.from(editor.value.slice(0, editor.selectionStart));
  let start = before.length;
  while (start > 0 && before.length - start < CONTEXT_CHARS && HAN.test(before[start - 1])) start--;
  return before.slice(start).join("");
}

function schedule() {
  clearTimeout(timer);
  const id = ++sequence;
  if (!preedit) {
    converted = null;
    pending = Promise.resolve();
    render();
    return;
  }
  const typed = preedit;
  render();
  pending = new Promise(resolve => {
    timer = setTimeout(() => convert(typed, id).finally(resolve), DEBOUNCE_MS);
  });
}

async function convert(typed, id) {
  const context = contextBeforeCursor();
  await learning;
  try {
    const response = await fetch("/convert", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ text: context + typed, nbest: NBEST }),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    if (id !== sequence) return;
    const candidates = body.candidates.map(candidate => ({
      ...candidate,
      shown: candidate.text.startsWith(context) ? candidate.text.slice(context.length) : candidate.text,
    }));
    converted = { preedit: typed, context, candidates };
    highlighted = 0;
    statusView.textContent = "";
    render();
    drawAttention();
  } catch (error) {
    if (id !== sequence) return;
    converted = null;
    statusView.textContent = `conversion failed: ${error.message}`;
    render();
  }
}

// ---------------------------------------------------------------------------------------------- keys

editor.addEventListener("keydown", event => {
  if (event.isComposing || event.ctrlKey || event.metaKey || event.altKey) return;
  const key = event.key;
  const composes = /^[a-z]$/.test(key);
  if (!composes && !(busy() && (key.length === 1 || COMPOSING_KEYS.has(key)))) return;
  event.preventDefault();
  enqueue(key);
});

candidateList.addEventListener("mousedown", event => event.preventDefault());  // keep the editor's cursor
candidateList.addEventListener("click", event => {
  const item = event.target.closest("li");
  if (item) enqueue({ commit: Number(item.dataset.index) });
  editor.focus();
});

function enqueue(key) {
  keyQueue.push(key);
  if (!draining) drain();
}

async function drain() {
  draining = true;
  try {
    while (keyQueue.length) await handle(keyQueue.shift());
  } finally {
    draining = false;
  }
}

async function handle(key) {
  if (typeof key === "object") return commit(key.commit);
  if (/^[a-z]$/.test(key) || (key === "'" && preedit)) {
    preedit += key;
    return schedule();
  }
  if (!preedit) return plainKey(key);
  if (key === " ") return commit(highlighted);
  if (/^[1-9]$/.test(key)) return commit(Number(key) - 1);
  switch (key) {
    case "Backspace": preedit = preedit.slice(0, -1); return schedule();
    case "Escape": preedit = ""; return schedule();
    case "Enter": insert(preedit); preedit = ""; return schedule();  // the letters as typed
    case "ArrowDown": case "ArrowRight": case "Tab": return move(1);
    case "ArrowUp": case "ArrowLeft": return move(-1);
  }
  if (key.length === 1) {  // punctuation and the like end the composition
    await commit(highlighted);
    insert(CHINESE_PUNCTUATION[key] || key);
  }
}

// What the key does without a composition, for keys queued while one was still open.
function plainKey(key) {
  const start = editor.selectionStart, end = editor.selectionEnd;
  if (key.length === 1) insert(key);
  else if (key === "Enter") insert("\n");
  else if (key === "Backspace") {
    const from = start !== end ? start : Math.max(0, start - (/[\udc00-\udfff]/.test(editor.value[start - 1]) ? 2 : 1));
    editor.setRangeText("", from, end, "end");
  } else if (key === "ArrowLeft") editor.setSelectionRange(Math.max(0, start - 1), Math.max(0, start - 1));
  else if (key === "ArrowRight") editor.setSelectionRange(end + 1, end + 1);
}

async function commit(index) {
  await pending;
  if (!converted || converted.preedit !== preedit) return;  // its conversion failed: nothing to commit
  const candidate = converted.candidates[index];
  if (!candidate) return;
  insert(candidate.shown);
  learn(candidate.shown);
  preedit = "";
  schedule();
}

function learn(text) {
  learning = fetch("/learn", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ text }),
  }).then(async response => {
    if (!response.ok) throw new Error((await response.json()).error || response.statusText);
  }).catch(error => { statusView.textContent = `learning failed: ${error.message}`; });
}

function move(step) {
  if (!converted) return;
  const count = converted.candidates.length;
  highlighted = (highlighted + step + count) % count;
  render();
  drawAttention();
}

function insert(text) {
  editor.setRangeText(text, editor.selectionStart, editor.selectionEnd, "end");
  editor.dispatchEvent(new Event("input", { bubbles: true }));
}

// ------------------------------------------------------------------------------------------- drawing

function render() {
  preeditView.textContent = preedit;
  candidateList.replaceChildren();
  const current = preedit && converted;
  candidateList.classList.toggle("stale", Boolean(current && converted.preedit !== preedit));
  candidateList.dataset.for = current ? converted.preedit : "";  // which typing they convert (for tests)
  if (!current) return;
  converted.candidates.forEach((candidate, index) => {
    const item = document.createElement("li");
    item.dataset.index = index;
    item.classList.toggle("highlighted", index === highlighted);
    const number = document.createElement("span");
    number.className = "number";
    number.textContent = index + 1;
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = candidate.shown;
    const reading = document.createElement("span");
    reading.className = "reading";
    reading.textContent = candidate.syllables.slice(converted.context.length).join(" ");
    item.append(number, text, reading);
    item.title = `score ${candidate.score.toFixed(2)}`;
    candidateList.append(item);
  });
}

async function drawAttention() {
  if (!panel.open || !converted || !converted.candidates[highlighted]) return;
  const candidate = converted.candidates[highlighted];
  if (!candidate.text) return;
  const id = sequence;
  try {
    const response = await fetch("/attention", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ text: candidate.text, syllables: candidate.segmentation }),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    if (id !== sequence) return;
    attention = body;
    fillLayers(body.layers.length);
    paint();
  } catch (error) {
    statusView.textContent = `attention failed: ${error.message}`;
  }
}

function fillLayers(count) {
  if (layerSelect.options.length === count + 1) return;
  const previous = layerSelect.value;
  layerSelect.replaceChildren(new Option("all (mean)", "mean"));
  for (let layer = 0; layer < count; layer++) layerSelect.append(new Option(`${layer + 1}`, `${layer}`));
  layerSelect.value = previous && [...layerSelect.options].some(o => o.value === previous) ? previous : "mean";
}

function selectedWeights() {
  const { layers } = attention;
  if (layerSelect.value !== "mean") return layers[Number(layerSelect.value)];
  return layers[0].map((row, i) => row.map((_, j) => layers.reduce((sum, layer) => sum + layer[i][j], 0) /
                                                    layers.length));
}

// Viridis-like ramp: dark blue (0) -> green -> yellow (1), as in the command line's attention figures.
function colour(weight) {
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  const x = Math.min(1, Math.max(0, weight)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x)), t = x - i;
  const rgb = stops[i].map((value, k) => Math.round(value + t * (stops[i + 1][k] - value)));
  return `rgb(${rgb.join(",")})`;
}

function paint() {
  if (!attention) return;
  const weights = selectedWeights();
  const { chars, syllables } = attention;
  const cell = 30, left = 36, top = 58;
  const ratio = window.devicePixelRatio || 1;
  // 40 px on the right: room for the last syllable's slanted label
  const width = left + cell * syllables.length + 40, height = top + cell * chars.length + 8;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.fillStyle = "#fff";
  g.fillRect(0, 0, width, height);
  g.font = '16px "WenQuanYi Micro Hei", "Noto Sans CJK SC", sans-serif';
  g.textAlign = "center";
  g.textBaseline = "middle";
  chars.forEach((char, i) => {
    g.fillStyle = "#222";
    g.fillText(char, left / 2, top + cell * i + cell / 2);
    syllables.forEach((_, j) => {
      g.fillStyle = colour(weights[i][j]);
      g.fillRect(left + cell * j, top + cell * i, cell - 1, cell - 1);
    });
  });
  g.font = "12px ui-monospace, monospace";
  syllables.forEach((syllable, j) => {
    g.save();
    g.translate(left + cell * j + cell / 2, top - 6);
    g.rotate(-Math.PI / 4);
    g.textAlign = "left";
    g.fillStyle = "#222";
    g.fillText(syllable, 0, 0);
    g.restore();
  });
  canvas.dataset.shape = `${chars.length}x${syllables.length}`;  // rows x columns, for tests and tools
}

// --------------------------------------------------------------------------------------------- fonts

// Without a font that has hanzi the browser draws every hanzi as the same missing-glyph box, and the page is
// unreadable without saying why. Two different hanzi drawn alike (the same pixels, in the page's own fonts)
// mean there is none: the hint names a font package. (A browser that writes each box's code point in it, as
// Firefox does, tells them apart and gets no hint.)
function hanziRender() {
  const probe = document.createElement("canvas");
  probe.width = probe.height = 40;
  const g = probe.getContext("2d", { willReadFrequently: true });
  g.font = `32px ${getComputedStyle(document.body).fontFamily}`;
  const pixels = text => {
    g.clearRect(0, 0, 40, 40);
    g.fillText(text, 4, 34);
    return g.getImageData(0, 0, 40, 40).data.join();
  };
  return pixels("中") !== pixels("国");
}

function checkHanziFont() {
  document.getElementById("font-hint").hidden = hanziRender();
}

layerSelect.addEventListener("change", paint);
panel.addEventListener("toggle", () => { if (panel.open) drawAttention(); });
document.fonts.addEventListener("loadingdone", checkHanziFont);  // a web font may bring the hanzi
checkHanziFont();
render();
