// The `vit serve` page: send an image to /api/explain, draw it with the attention-rollout
// heatmap on top (a segmenter: its class mask; a detector: its boxes), and list the top classes
// (a segmenter: by pixel share; a detector: its boxes by score). A clip model takes a video or
// volume, and the page draws the frames the model saw (the answer's `picture`) in its place.
// No framework, no build step, nothing from a CDN.
"use strict";

const page = {
  model: null,
  status: document.getElementById("status"),
  photo: document.getElementById("photo"),
  heatmap: document.getElementById("heatmap"),
};

// An "inferno"-like colour scale: dark and transparent where the model does not look, bright
// and opaque where it looks most.
const COLOUR_STOPS = [
  [0.0, [0, 0, 4]], [0.25, [87, 16, 110]], [0.5, [188, 55, 84]],
  [0.75, [249, 142, 9]], [1.0, [252, 255, 164]],
];
const VIEW_WIDTH = 448; // canvas pixels of the drawn image (CSS scales it to the column)

function setState(state, message) {
  document.body.dataset.state = state;
  page.status.textContent = message;
}

function colourAt(value) {
  const v = Math.min(1, Math.max(0, value));
  for (let i = 1; i < COLOUR_STOPS.length; i++) {
    const [end, to] = COLOUR_STOPS[i];
    const [start, from] = COLOUR_STOPS[i - 1];
    if (v <= end) {
      const t = (v - start) / (end - start);
      return from.map((c, k) => Math.round(c + t * (to[k] - c)));
    }
  }
  return COLOUR_STOPS[COLOUR_STOPS.length - 1][1];
}

async function loadModel() {
  const response = await fetch("/api/model");
  page.model = await response.json();
  const size = page.model.image_size ? page.model.image_size.join("×") + " px" : "any size";
  const frames = page.model.frames ? `${page.model.frames} frames of ` : "";
  document.getElementById("model-line").textContent =
    `Model “${page.model.name}” (${page.model.format}, ${page.model.classes} classes, ` +
    `${frames}${size}).`;
  document.getElementById("api-name").textContent = page.model.name;
  if (page.model.drawing_script) { // the task draws its answers itself
    const own = await import("/static/task.js");
    DRAWINGS[page.model.task] = (result) => own.draw(result, page.heatmap);
  }
  const noun = page.model.input_noun || "image";
  const aNoun = `${/^[aeiou]/.test(noun) ? "an" : "a"} ${noun}`;
  document.querySelectorAll(".noun").forEach((element) => { element.textContent = noun; });
  document.querySelectorAll(".a-noun").forEach((element) => { element.textContent = aNoun; });
  if (page.model.accept) {
    document.getElementById("file").accept = page.model.accept;
    document.getElementById("kinds").textContent = page.model.hint;
  }
  setState("ready", `Ready: choose or drop ${aNoun}.`);
}

async function classify(file) {
  if (page.model && file.size > page.model.max_request_bytes) {
    setState("error", `${file.name} has ${file.size} bytes; this server takes at most ` +
      `${page.model.max_request_bytes}.`);
    return;
  }
  setState("working", `${page.model ? page.model.verb : "Classifying"} ` +
    `${file.name}…`);
  const response = await fetch("/api/explain", {
    method: "POST", body: file,
    headers: { "Content-Type": file.type || "application/octet-stream" },
  });
  const result = await response.json();
  if (!response.ok) {
    setState("error", result.error || `The server answered ${response.status}.`);
    return;
  }
  // A file that is no image (a video) is drawn as the frames the server says the model saw.
  const image = result.picture ? await pictureOf(result.picture) : await createImageBitmap(file);
  drawPhoto(image);
  (DRAWINGS[result.drawing] || DRAWINGS.labels)(result);
  showClasses(result.top);
  document.getElementById("result").hidden = false;
  document.getElementById("heatmap-caption").textContent = result.caption;
  // Nothing drawn over the picture: no fader for it.
  document.querySelector(".opacity").hidden = result.drawing === "labels" && !result.heatmap;
  const best = result.top[0];
  if (!best) {
    setState("done", `${file.name}: ${result.empty}`);
    return;
  }
  document.body.dataset.top1 = best.label;
  const what = result.score_of || "";
  setState("done", `${file.name}: ${best.label} (${(100 * score(best)).toFixed(1)}%` +
    `${what ? " " + what : ""}).`);
}

// How the page draws an answer, by the kind its task declares (`InferenceTask.page_answer`);
// a task with its own script adds its drawing under its name.
const DRAWINGS = {
  labels: (result) => drawHeatmap(result.heatmap),
  mask: (result) => drawMask(result.mask),
  boxes: (result) => drawBoxes(result.boxes),
};

async function pictureOf(source) {
  const picture = new Image();
  picture.src = source;
  await picture.decode();
  return createImageBitmap(picture);
}

// A classifier's class has a probability; a segmenter's, the share of pixels it covers.
function score(item) {
  return "share" in item ? item.share : item.probability;
}

function drawPhoto(image) {
  const height = Math.round(VIEW_WIDTH * image.height / image.width);
  for (const canvas of [page.photo, page.heatmap]) {
    canvas.width = VIEW_WIDTH;
    canvas.height = height;
  }
  const small = image.width < VIEW_WIDTH / 4; // tiny images (digits): show their pixels
  document.querySelector(".stack").classList.toggle("pixelated", small);
  const context = page.photo.getContext("2d");
  context.imageSmoothingEnabled = !small;
  context.drawImage(image, 0, 0, VIEW_WIDTH, height);
}

// The model saw the image resized to its input size, so the patch grid spans the whole image.
function drawHeatmap(heatmap) {
  const context = page.heatmap.getContext("2d");
  context.clearRect(0, 0, page.heatmap.width, page.heatmap.height);
  if (!heatmap) {
    return;
  }
  const grid = document.createElement("canvas");
  grid.width = heatmap.cols;
  grid.height = heatmap.rows;
  const cells = grid.getContext("2d").createImageData(heatmap.cols, heatmap.rows);
  heatmap.values.forEach((value, i) => {
    cells.data.set([...colourAt(value), 255], 4 * i);
  });
  grid.getContext("2d").putImageData(cells, 0, 0);
  context.imageSmoothingEnabled = true;
  context.imageSmoothingQuality = "high";
  context.drawImage(grid, 0, 0, page.heatmap.width, page.heatmap.height);
}

// The mask is at the model's size; the model saw the whole image resized, so it spans it all.
function drawMask(mask) {
  const context = page.heatmap.getContext("2d");
  context.clearRect(0, 0, page.heatmap.width, page.heatmap.height);
  const grid = document.createElement("canvas");
  grid.width = mask.cols;
  grid.height = mask.rows;
  const cells = grid.getContext("2d").createImageData(mask.cols, mask.rows);
  mask.values.forEach((id, i) => {
    cells.data.set([...mask.colours[id], id === 0 ? 0 : 255], 4 * i);
  });
  grid.getContext("2d").putImageData(cells, 0, 0);
  context.imageSmoothingEnabled = false; // class edges stay sharp
  context.drawImage(grid, 0, 0, page.heatmap.width, page.heatmap.height);
  document.body.dataset.maskClasses = [...new Set(mask.values)].sort((a, b) => a - b).join(",");
}

// Boxes are fractions of the image (the model saw all of it, resized): x0, y0, x1, y1.
const BOX_COLOURS = ["#ff4f6d", "#3ec1d3", "#ffb400", "#8fd14f", "#b388ff", "#ff8a3d"];
function drawBoxes(boxes) {
  const context = page.heatmap.getContext("2d");
  const { width, height } = page.heatmap;
  context.clearRect(0, 0, width, height);
  context.lineWidth = 3;
  context.font = "14px sans-serif";
  const colourOf = {};
  boxes.forEach(({ label, score: value, box }) => {
    colourOf[label] ??= BOX_COLOURS[Object.keys(colourOf).length % BOX_COLOURS.length];
    const [x0, y0, x1, y1] = [box[0] * width, box[1] * height, box[2] * width, box[3] * height];
    context.strokeStyle = context.fillStyle = colourOf[label];
    context.strokeRect(x0, y0, x1 - x0, y1 - y0);
    const text = `${label} ${(100 * value).toFixed(0)}%`;
    const top = Math.max(0, y0 - 18);
    context.fillRect(x0, top, context.measureText(text).width + 6, 18);
    context.fillStyle = "#000";
    context.fillText(text, x0 + 3, top + 14);
  });
  document.body.dataset.boxes = boxes.length;
}

function showClasses(top) {
  const list = document.getElementById("top");
  list.replaceChildren(...top.map((entry) => {
    const { label } = entry;
    const probability = score(entry);
    const item = document.createElement("li");
    const row = document.createElement("div");
    row.className = "row";
    const name = document.createElement("span");
    name.className = "label";
    name.textContent = label;
    const percent = document.createElement("span");
    percent.textContent = `${(100 * probability).toFixed(1)}%`;
    row.append(name, percent);
    const bar = document.createElement("div");
    bar.className = "bar";
    const fill = document.createElement("span");
    fill.style.width = `${(100 * probability).toFixed(1)}%`;
    bar.append(fill);
    item.append(row, bar);
    return item;
  }));
}

function report(error) {
  setState("error", `Something went wrong: ${error.message || error}`);
}

function watchInputs() {
  const drop = document.getElementById("drop");
  document.getElementById("file").addEventListener("change", (event) => {
    if (event.target.files.length) {
      classify(event.target.files[0]).catch(report);
    }
  });
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    if (event.dataTransfer.files.length) {
      classify(event.dataTransfer.files[0]).catch(report);
    }
  });
  document.getElementById("opacity").addEventListener("input", (event) => {
    page.heatmap.style.opacity = event.target.value / 100;
  });
}

watchInputs();
loadModel().catch(report);
