#include "attnkit/viz/plot.h"

#include <ATen/ATen.h>
#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"

namespace attnkit::viz {
namespace {

constexpr const char* kFont = "Noto Sans CJK SC";  // falls back through fontconfig elsewhere
constexpr double kCell = 30, kPad = 16, kTitle = 26, kBar = 14;

struct Rgb {
  double r, g, b;
};

// Viridis, sampled at nine points and interpolated: perceptually ordered, readable in grey.
Rgb viridis(double t) {
  static const Rgb stops[] = {{0.267, 0.005, 0.329}, {0.283, 0.141, 0.458}, {0.254, 0.265, 0.530},
                              {0.207, 0.372, 0.553}, {0.164, 0.471, 0.558}, {0.128, 0.567, 0.551},
                              {0.135, 0.659, 0.518}, {0.478, 0.821, 0.318}, {0.993, 0.906, 0.144}};
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * 8;
  const int i = std::min(7, static_cast<int>(t));
  const double f = t - i;
  const Rgb &a = stops[i], &b = stops[i + 1];
  return {a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)};
}

struct Surface {
  cairo_surface_t* surface = nullptr;
  cairo_t* cr = nullptr;
  std::string final_path, tmp_path;
  bool png = true;
  ~Surface() {
    if (cr) cairo_destroy(cr);
    if (surface) cairo_surface_destroy(surface);
  }
};

std::unique_ptr<Surface> open_surface(const std::string& path, double width, double height) {
  auto s = std::make_unique<Surface>();
  s->final_path = path;
  s->tmp_path = path + ".tmp";  // the temporary that write_atomically renames in finish()
  const auto dot = path.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : path.substr(dot);
  if (ext == ".svg") {
    s->png = false;
    s->surface = cairo_svg_surface_create(s->tmp_path.c_str(), width, height);
  } else if (ext == ".png") {
    s->surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, static_cast<int>(std::ceil(width)),
                                            static_cast<int>(std::ceil(height)));
  } else {
    throw Error(path + ": the picture format follows the extension, .png or .svg");
  }
  if (cairo_surface_status(s->surface) != CAIRO_STATUS_SUCCESS)
    throw Error(path + ": cannot create the picture (" +
                cairo_status_to_string(cairo_surface_status(s->surface)) + ")");
  s->cr = cairo_create(s->surface);
  cairo_set_source_rgb(s->cr, 1, 1, 1);
  cairo_paint(s->cr);
  cairo_select_font_face(s->cr, kFont, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  return s;
}

// The picture into its file: a PNG is written out now, an SVG surface has been writing into the
// temporary since open_surface and is finished here.
void finish(Surface& s) {
  write_atomically(s.final_path, "the picture", [&](const std::string& tmp) {
    const cairo_status_t status =
        s.png ? cairo_surface_write_to_png(s.surface, tmp.c_str())
              : (cairo_surface_finish(s.surface), cairo_surface_status(s.surface));
    if (status != CAIRO_STATUS_SUCCESS) throw Error(cairo_status_to_string(status));
  });
}

double text_width(cairo_t* cr, const std::string& text, double size) {
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, text.c_str(), &e);
  return e.x_advance;
}

void text_at(cairo_t* cr, const std::string& text, double x, double y, double size,
             double align = 0) {
  cairo_set_font_size(cr, size);
  cairo_move_to(cr, x - align * text_width(cr, text, size), y);
  cairo_show_text(cr, text.c_str());
}

std::string fmt(double v, const char* f = "%.2f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

struct PanelGeometry {
  double label_w, label_h, width, height;
};

PanelGeometry measure(cairo_t* cr, const Heatmap& h) {
  double lw = 0, lh = 0;
  for (const auto& l : h.row_labels) lw = std::max(lw, text_width(cr, l, 13));
  for (const auto& l : h.col_labels) lh = std::max(lh, text_width(cr, l, 13));
  const double cols = static_cast<double>(h.weights.size(1)),
               rows = static_cast<double>(h.weights.size(0));
  const double width = lw + 8 + cols * kCell;
  const double height = kTitle + lh + 8 + rows * kCell;
  return {lw, lh, std::max(width, text_width(cr, h.title, 14) + 4), height};
}

void draw_panel(cairo_t* cr, const Heatmap& h, const PanelGeometry& g, double x0, double y0) {
  auto w = h.weights.detach().to(at::kDouble).contiguous();
  const int64_t rows = w.size(0), cols = w.size(1);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  text_at(cr, h.title, x0, y0 + 16, 14);
  const double gx = x0 + g.label_w + 8, gy = y0 + kTitle + g.label_h + 8;
  // Source tokens along the top, rotated so long words fit.
  for (int64_t j = 0; j < cols && j < static_cast<int64_t>(h.col_labels.size()); ++j) {
    cairo_save(cr);
    cairo_move_to(cr, gx + j * kCell + kCell / 2 + 4, gy - 6);
    cairo_rotate(cr, -M_PI / 2);
    cairo_set_font_size(cr, 13);
    cairo_show_text(cr, h.col_labels[j].c_str());
    cairo_restore(cr);
  }
  for (int64_t i = 0; i < rows; ++i) {
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    if (i < static_cast<int64_t>(h.row_labels.size()))
      text_at(cr, h.row_labels[i], gx - 6, gy + i * kCell + kCell / 2 + 5, 13, 1.0);
    for (int64_t j = 0; j < cols; ++j) {
      const double v = w[i][j].item<double>();
      const Rgb c = viridis(v);
      cairo_set_source_rgb(cr, c.r, c.g, c.b);
      cairo_rectangle(cr, gx + j * kCell, gy + i * kCell, kCell - 1, kCell - 1);
      cairo_fill(cr);
      if (rows * cols <= 144) {  // small matrices get their numbers
        cairo_set_source_rgb(cr, v > 0.6 ? 0.1 : 0.95, v > 0.6 ? 0.1 : 0.95, v > 0.6 ? 0.1 : 0.95);
        text_at(cr, fmt(v), gx + j * kCell + kCell / 2, gy + i * kCell + kCell / 2 + 3.5, 9, 0.5);
      }
    }
  }
}

}  // namespace

void render_heatmaps(const std::vector<Heatmap>& panels, const std::string& path) {
  if (panels.empty()) throw Error(path + ": nothing to draw");
  for (const auto& p : panels)
    if (!p.weights.defined() || p.weights.dim() != 2)
      throw Error(path + ": a heatmap needs a 2-D matrix");
  // Measure with a scratch surface, then draw at the final size.
  auto scratch = open_surface(path + ".png", 1, 1);
  std::vector<PanelGeometry> geometry;
  double width = kPad, height = 0;
  for (const auto& p : panels) {
    geometry.push_back(measure(scratch->cr, p));
    width += geometry.back().width + 2 * kPad;
    height = std::max(height, geometry.back().height);
  }
  width += kBar + 50;
  height += 2 * kPad;
  auto s = open_surface(path, width, height);
  double x = kPad;
  double grid_top = kPad + kTitle, grid_bottom = height - kPad;
  for (size_t i = 0; i < panels.size(); ++i) {
    draw_panel(s->cr, panels[i], geometry[i], x, kPad);
    grid_top = std::max(grid_top, kPad + kTitle + geometry[i].label_h + 8);
    x += geometry[i].width + 2 * kPad;
  }
  // The colour bar.
  const double bar_h = std::max(60.0, grid_bottom - grid_top);
  for (int k = 0; k < 100; ++k) {
    const Rgb c = viridis(1.0 - k / 99.0);
    cairo_set_source_rgb(s->cr, c.r, c.g, c.b);
    cairo_rectangle(s->cr, x, grid_top + k * bar_h / 100, kBar, bar_h / 100 + 0.5);
    cairo_fill(s->cr);
  }
  cairo_set_source_rgb(s->cr, 0.1, 0.1, 0.1);
  for (double v : {1.0, 0.5, 0.0})
    text_at(s->cr, fmt(v, "%.1f"), x + kBar + 4, grid_top + (1 - v) * bar_h + 4, 11);
  finish(*s);
}

std::vector<std::vector<double>> rounded_rows(const at::Tensor& matrix) {
  std::vector<std::vector<double>> rows;
  if (!matrix.defined()) return rows;
  auto m = matrix.detach().to(at::kDouble).contiguous();
  const double* p = m.data_ptr<double>();
  for (int64_t i = 0; i < m.size(0); ++i) {
    std::vector<double> row;
    for (int64_t j = 0; j < m.size(1); ++j) row.push_back(std::round(*p++ * 1e4) / 1e4);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<std::vector<std::vector<std::vector<double>>>> rounded_heads(
    const std::vector<at::Tensor>& layers) {
  std::vector<std::vector<std::vector<std::vector<double>>>> out;
  for (const auto& layer : layers) {
    std::vector<std::vector<std::vector<double>>> heads;
    for (int64_t h = 0; h < layer.size(0); ++h) heads.push_back(rounded_rows(layer[h]));
    out.push_back(std::move(heads));
  }
  return out;
}

std::string heatmap_json(const Heatmap& h) {
  return nlohmann::json{{"title", h.title},
                        {"rows", h.row_labels},
                        {"cols", h.col_labels},
                        {"weights", rounded_rows(h.weights)}}
      .dump(1);
}

void render_charts(const std::vector<Chart>& charts, const std::string& path) {
  if (charts.empty()) throw Error(path + ": nothing to draw");
  const double cw = 420, ch = 300, left = 56, bottom = 44, top = 34, right = 16;
  auto s = open_surface(path, charts.size() * cw, ch);
  cairo_t* cr = s->cr;
  static const Rgb colours[] = {
      {0.12, 0.47, 0.71}, {1.0, 0.50, 0.05}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16}};
  for (size_t c = 0; c < charts.size(); ++c) {
    const auto& chart = charts[c];
    const double x0 = c * cw + left, x1 = (c + 1) * cw - right, y0 = top, y1 = ch - bottom;
    double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
    for (const auto& sr : chart.series)
      for (const auto& [x, y] : sr.points) {
        xmin = std::min(xmin, x);
        xmax = std::max(xmax, x);
        ymin = std::min(ymin, y);
        ymax = std::max(ymax, y);
      }
    if (xmin > xmax) {
      xmin = 0;
      xmax = 1;
      ymin = 0;
      ymax = 1;
    }
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax == ymin) ymax = ymin + 1;
    const double pad = 0.05 * (ymax - ymin);
    ymin -= pad;
    ymax += pad;
    auto px = [&](double x) { return x0 + (x - xmin) / (xmax - xmin) * (x1 - x0); };
    auto py = [&](double y) { return y1 - (y - ymin) / (ymax - ymin) * (y1 - y0); };
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text_at(cr, chart.title, (x0 + x1) / 2, 20, 14, 0.5);
    text_at(cr, chart.x_label, (x0 + x1) / 2, ch - 8, 12, 0.5);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, x0, y0, x1 - x0, y1 - y0);
    cairo_stroke(cr);
    for (int k = 0; k <= 4; ++k) {  // ticks
      const double yv = ymin + k * (ymax - ymin) / 4, xv = xmin + k * (xmax - xmin) / 4;
      text_at(cr, fmt(yv, std::abs(ymax) >= 100 ? "%.0f" : "%.2f"), x0 - 4, py(yv) + 4, 10, 1.0);
      text_at(cr, fmt(xv, "%.3g"), px(xv), y1 + 14, 10, 0.5);
    }
    for (size_t k = 0; k < chart.series.size(); ++k) {
      const auto& sr = chart.series[k];
      const Rgb col = colours[k % 4];
      cairo_set_source_rgb(cr, col.r, col.g, col.b);
      cairo_set_line_width(cr, 2);
      for (size_t i = 0; i < sr.points.size(); ++i) {
        const double X = px(sr.points[i].first), Y = py(sr.points[i].second);
        if (i == 0)
          cairo_move_to(cr, X, Y);
        else
          cairo_line_to(cr, X, Y);
      }
      cairo_stroke(cr);
      for (const auto& [x, y] : sr.points) {
        cairo_arc(cr, px(x), py(y), 2.5, 0, 2 * M_PI);
        cairo_fill(cr);
      }
      cairo_rectangle(cr, x1 - 110, y0 + 8 + k * 16, 12, 3);
      cairo_fill(cr);
      cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
      text_at(cr, sr.name, x1 - 94, y0 + 13 + k * 16, 11);
    }
  }
  finish(*s);
}

std::vector<Chart> training_charts(const std::string& metrics_jsonl) {
  std::istringstream in(read_small_file(metrics_jsonl, size_t(256) << 20, "a training log"));
  Series train{"train loss", {}}, valid{"valid loss", {}}, bleu{"valid BLEU", {}};
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(metrics_jsonl + ":" + std::to_string(n) + ": not JSON (" + e.what() + ")");
    }
    if (!j.contains("epoch")) continue;
    const double epoch = j["epoch"].get<double>();
    if (j.contains("train_loss")) train.points.emplace_back(epoch, j["train_loss"].get<double>());
    if (j.contains("valid_loss") && !j["valid_loss"].is_null() && j["valid_loss"].get<double>() > 0)
      valid.points.emplace_back(epoch, j["valid_loss"].get<double>());
    if (j.contains("valid_bleu") && j["valid_bleu"].get<double>() >= 0)
      bleu.points.emplace_back(epoch, j["valid_bleu"].get<double>());
  }
  if (train.points.empty()) throw Error(metrics_jsonl + ": no epoch records");
  std::vector<Chart> charts = {{"loss", "epoch", "cross-entropy", {train}}};
  if (!valid.points.empty()) charts[0].series.push_back(valid);
  if (!bleu.points.empty()) charts.push_back({"validation BLEU", "epoch", "BLEU", {bleu}});
  return charts;
}

}  // namespace attnkit::viz
