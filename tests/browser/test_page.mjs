// The web page in a real browser: Debian's chromium driven by playwright-core.
// Usage: node test_page.mjs ATTNKIT_BINARY MODEL_DIR ARTIFACT_DIR [TRANSFORMER_MODEL_DIR]
// Starts `attnkit serve` on 127.0.0.1 (any free port), then:
//   1. types a sentence and presses Translate;
//   2. checks the heatmap has |source| x |attention rows| cells (the end-of-sentence step
//      labelled) and that hovering highlights;
//   3. runs the playground on the notes' soft-attention example (0.5761) and self attention (0.4711);
//   4. with a Transformer model too: picks a layer and head of the cross-attention and the
//      decoder self-attention, and checks the cells against the API's maps;
//   5. uploads tests/data/catalog.pot on the catalog part, checks one suggestion and its heatmap,
//      downloads the result and runs msgfmt --check on it;
//   6. saves screenshots into ARTIFACT_DIR.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const [binary, model, artifacts, transformerModel] = process.argv.slice(2);
if (!binary || !model || !artifacts) {
  console.error("usage: node test_page.mjs ATTNKIT_BINARY MODEL_DIR ARTIFACT_DIR");
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });

let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) { passed++; console.log(`ok   ${name}`); }
  else { failed++; console.log(`FAIL ${name} ${detail}`); }
}

function startServer(modelDir = model) {
  const server = spawn(binary, ["--threads", "1", "serve", "--model", modelDir, "--host", "127.0.0.1", "--port", "0"],
                       { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the server did not start within 30 s")), 30000);
    let out = "";
    server.stdout.on("data", (chunk) => {
      out += chunk;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+\/)/);
      if (m) { clearTimeout(timer); resolve({ server, url: m[1] }); }
    });
    server.on("exit", (code) => reject(new Error(`the server exited with ${code}`)));
  });
}

const { server, url } = await startServer();
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  await page.goto(url);

  // 1-2. Translate and inspect the heatmap.
  const sentence = "Open the file";
  await page.fill("#source", sentence);
  await page.click("#translate-button");
  await page.waitForSelector("#heatmap .cell", { timeout: 20000 });
  const api = await (await fetch(url + "api/translate", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ text: sentence, beam: 5 }) })).json();
  const translation = await page.textContent("#translation");
  check("the page shows the API's translation", translation === api.translation, `${translation} vs ${api.translation}`);
  const cells = await page.locator("#heatmap .cell").count();
  const expected = api.source_tokens.length * api.attention_rows.length;
  check(`the heatmap has |source| x |attention rows| = ${expected} cells`, cells === expected,
        `got ${cells}`);
  const lastRow = await page.locator("#heatmap .row-label").last().textContent();
  check("the end-of-sentence step is a labelled row", api.attention_rows.length ===
        api.target_tokens.length + 1 ? lastRow === "</s>" : true, `last row '${lastRow}'`);
  await page.hover('#heatmap .row-label[data-row="0"]');
  const rowCells = await page.locator("#heatmap .cell.active").count();
  const rowSources = await page.locator("#heatmap .col-label.active").count();
  check("hovering a target token highlights the source tokens it attends to", rowCells > 0 && rowSources > 0,
        `${rowCells} cells, ${rowSources} labels`);
  await page.screenshot({ path: `${artifacts}/translate-hover-target.png`, fullPage: true });
  await page.hover('#heatmap .col-label[data-col="0"]');
  const colTargets = await page.locator("#heatmap .row-label.active").count();
  check("hovering a source token highlights the target tokens that attend to it", colTargets > 0, `${colTargets}`);
  await page.screenshot({ path: `${artifacts}/translate-hover-source.png`, fullPage: true });

  // 3. The playground, loaded with the notes' soft-attention example.
  await page.click("#attend-button");
  await page.waitForSelector("#playground-weights td");
  const soft = await page.textContent("#playground-weights");
  check("the playground reproduces the notes' soft attention (0.5761, 0.2119)", soft.includes("0.5761") && soft.includes("0.2119"), soft);
  await page.screenshot({ path: `${artifacts}/playground-soft.png`, fullPage: true });
  await page.selectOption("#mechanism", "self");
  await page.click("#attend-button");
  await page.waitForFunction(() => document.querySelectorAll("#playground-weights tr").length === 3);
  const self = await page.textContent("#playground-weights");
  check("self attention of I3 gives 0.4711 on the diagonal", self.includes("0.4711") && self.includes("0.2645"), self);
  await page.screenshot({ path: `${artifacts}/playground-self.png`, fullPage: true });

  // Bad input gets a message, not a broken page.
  await page.fill("#k", "[[1, 2]]");
  await page.selectOption("#mechanism", "soft");
  await page.fill("#q", "[[1, 0, 0]]");
  await page.click("#attend-button");
  await page.waitForFunction(() => document.querySelector("#attend-error").textContent.length > 0);
  check("a shape mismatch shows the server's message", (await page.textContent("#attend-error")).includes("columns"));

  const external = requests.filter((r) => !r.startsWith(url));
  check("the page loads nothing from the network (no CDN)", external.length === 0, external.join(", "));
  check("a GRU model offers no layer picker", await page.locator("#attention-map").isHidden());

  await checkCatalogPage(page, url, artifacts);
  if (transformerModel) await checkTransformerPage(browser, artifacts);
} catch (e) {
  check("the browser test ran to the end", false, e.stack);
} finally {
  await browser.close();
  server.kill("SIGTERM");
}
// 5. The catalog: upload a .pot, look at one suggestion's attention, download the result and let
// gettext's msgfmt judge it.
async function checkCatalogPage(page, url, artifacts) {
  const pot = fileURLToPath(new URL("../data/catalog.pot", import.meta.url));
  await page.setInputFiles("#po-file", pot);
  await page.click("#po-button");
  await page.waitForSelector("#po-entries tr", { timeout: 30000 });
  const api = await (await fetch(url + "api/po?lang=zh_CN&beam=5&name=catalog.pot", {
    method: "POST", headers: { "Content-Type": "text/x-gettext-translation" },
    body: readFileSync(pot) })).json();
  const rows = await page.locator("#po-entries tr").count();
  check(`the page lists the ${api.entries.length} filled entries`, rows === api.entries.length, `got ${rows}`);
  const i = api.entries.findIndex((e) => e.origin === "model" && e.msgid.startsWith("Cannot open"));
  const entry = api.entries[i];
  await page.click(`#po-entries tr[data-entry="${i}"]`);
  const suggestion = await page.textContent(`#po-entries tr[data-entry="${i}"] td:nth-child(2)`);
  check("an entry shows the API's suggestion", suggestion === entry.msgstr.join("\n"), `${suggestion} vs ${entry.msgstr}`);
  const out = api.segments[entry.segments[0]].output;
  const cells = await page.locator("#po-heatmap .cell").count();
  check(`its heatmap is |attention rows| x |source| = ${out.attention_rows.length * out.source_tokens.length}`,
        cells === out.attention_rows.length * out.source_tokens.length, `got ${cells}`);
  const input = await page.textContent("#po-input");
  check("the page shows the line as the model read it", input.includes(api.segments[entry.segments[0]].input), input);
  await page.screenshot({ path: `${artifacts}/po-entry.png`, fullPage: true });
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#po-download")]);
  const saved = `${artifacts}/${download.suggestedFilename()}`;
  await download.saveAs(saved);
  check("the download is named after the upload", download.suggestedFilename() === "catalog.po", download.suggestedFilename());
  check("the download is the API's catalog byte for byte",
        Buffer.compare(readFileSync(saved), Buffer.from(api.catalog_base64, "base64")) === 0);
  const msgfmt = spawnSync("msgfmt", ["--check", "--use-fuzzy", "-o", "/dev/null", saved], { encoding: "utf-8" });
  check("msgfmt --check passes on the download", msgfmt.status === 0, msgfmt.stderr);
}

// 4. A Transformer's maps: every layer and head of the cross-attention, and the self-attention.
async function checkTransformerPage(browser, artifacts) {
  const { server: tserver, url: turl } = await startServer(transformerModel);
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    await page.goto(turl);
    const sentence = "Open the file";
    await page.fill("#source", sentence);
    await page.click("#translate-button");
    await page.waitForSelector("#heatmap .cell", { timeout: 20000 });
    const api = await (await fetch(turl + "api/translate", {
      method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ text: sentence, beam: 5 }) })).json();
    const layers = api.attention_layers;
    check("a Transformer's answer carries its per-layer maps", !!layers && layers.cross.length > 0);
    const heads = layers.cross[0].length;
    const options = await page.locator("#attention-map option").count();
    const want = 1 + layers.cross.length * (heads + 1) + layers.encoder_self.length + layers.decoder_self.length;
    check(`the picker offers ${want} maps (average, each layer and head, self-attention)`, options === want,
          `got ${options}`);
    const last = layers.cross.length;
    await page.selectOption("#attention-map", { label: `cross, layer ${last}, head ${heads}` });
    const first = +(await page.locator('#heatmap .cell[data-row="0"][data-col="0"]').getAttribute("data-weight"));
    check("a picked head shows that head's weights", first === layers.cross[last - 1][heads - 1][0][0],
          `${first} vs ${layers.cross[last - 1][heads - 1][0][0]}`);
    await page.screenshot({ path: `${artifacts}/transformer-cross-head.png`, fullPage: true });
    await page.selectOption("#attention-map", { label: "decoder self, layer 1" });
    const cells = await page.locator("#heatmap .cell").count();
    check("the decoder self-attention is |rows| x |decoder inputs|",
          cells === api.attention_rows.length * layers.decoder_inputs.length, `got ${cells}`);
    const future = await page.locator('#heatmap .cell[data-row="0"][data-col="1"]').getAttribute("data-weight");
    check("the decoder self-attention never looks ahead", +future === 0, future);
    await page.screenshot({ path: `${artifacts}/transformer-decoder-self.png`, fullPage: true });
  } finally {
    tserver.kill("SIGTERM");
  }
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
