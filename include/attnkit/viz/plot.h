#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

// Pictures of attention and of training, drawn with cairo (PNG and SVG); CJK labels come from
// fontconfig's fallback to Noto CJK.
namespace attnkit::viz {

// One attention matrix: rows are target (or query) tokens, columns source (or key) tokens.
struct Heatmap {
  at::Tensor weights;                   // [rows, cols], values in [0, 1]
  std::vector<std::string> row_labels;  // target tokens
  std::vector<std::string> col_labels;  // source tokens
  std::string title;
};

// Panels side by side with a shared colour bar. The format follows the extension (.png or
// .svg); the file appears atomically (temporary file + rename).
void render_heatmaps(const std::vector<Heatmap>& panels, const std::string& path);

// {"title", "rows": [...], "cols": [...], "weights": [[...]]}
std::string heatmap_json(const Heatmap& h);

// A 2-D tensor as rows of numbers rounded to 4 decimals (for JSON output).
std::vector<std::vector<double>> rounded_rows(const at::Tensor& matrix);
// Per-layer [heads, rows, cols] maps as [layer][head][row][col], rounded likewise.
std::vector<std::vector<std::vector<std::vector<double>>>> rounded_heads(
    const std::vector<at::Tensor>& layers);

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y)
};
struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
};

// Line charts side by side (e.g. loss and BLEU against the epoch); .png or .svg.
void render_charts(const std::vector<Chart>& charts, const std::string& path);

// Loss and BLEU charts from a training run's metrics.jsonl (written by attnkit train).
std::vector<Chart> training_charts(const std::string& metrics_jsonl);

}  // namespace attnkit::viz
