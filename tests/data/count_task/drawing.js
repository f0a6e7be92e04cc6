// The count task's page drawing: the count, large, over the image.
export function draw(result, canvas) {
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  context.font = `bold ${Math.round(canvas.height / 3)}px sans-serif`;
  context.fillStyle = "rgba(255, 200, 0, 0.9)";
  context.textAlign = "center";
  context.textBaseline = "middle";
  context.fillText(String(result.count), canvas.width / 2, canvas.height / 2);
  document.body.dataset.drawn = `count ${result.count}`;
}
