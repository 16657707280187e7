#include "onnx/im2col_nd.hpp"

#include <algorithm>
#include <atomic>
#include <string>

#include "tessera/error.hpp"

namespace tessera::onnx {

namespace {

// An attribute list of one entry per spatial dim, or `fallback` in every dim when absent.
Shape per_dim(const NodeSpec& node, const std::string& key, std::size_t rank, std::int64_t fallback,
              std::int64_t minimum) {
  Shape v = node.get_ints(key, Shape(rank, fallback));
  if (v.size() != rank) {
    node.invalid("attribute '" + key + "' has " + std::to_string(v.size()) + " entries for " + std::to_string(rank) +
                 " spatial dims");
  }
  for (std::int64_t e : v) {
    if (e < minimum) node.invalid("attribute '" + key + "' has an entry below " + std::to_string(minimum));
  }
  return v;
}

}  // namespace

bool WindowGeometry::is_pointwise() const {
  for (std::size_t d = 0; d < rank(); ++d) {
    if (kernel[d] != 1 || stride[d] != 1 || pad_begin[d] != 0 || out[d] != in[d]) return false;
  }
  return true;
}

WindowGeometry window_geometry(const NodeSpec& node, const Shape& in, const Shape& kernel, bool ceil_mode) {
  const std::size_t rank = in.size();
  for (std::int64_t k : kernel) {
    if (k < 1) node.invalid("the kernel " + shape_str(kernel) + " has an empty dim");
  }
  WindowGeometry g;
  g.in = in;
  g.kernel = kernel;
  g.stride = per_dim(node, "strides", rank, 1, 1);
  g.dilation = per_dim(node, "dilations", rank, 1, 1);
  const std::string auto_pad = node.get_string("auto_pad", "NOTSET");
  Shape pads(2 * rank, 0);
  if (auto_pad == "NOTSET") {
    pads = per_dim(node, "pads", 2 * rank, 0, 0);
  } else if (auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
    node.unsupported("auto_pad '" + auto_pad + "'");
  }
  g.pad_begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(rank));
  g.pad_end.assign(pads.begin() + static_cast<std::ptrdiff_t>(rank), pads.end());
  g.out.resize(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t extent = (kernel[d] - 1) * g.dilation[d] + 1;  // the window's span
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      // The output covers ceil(in / stride) positions; the padding that needs splits
      // evenly, the odd element at the end (UPPER) or the beginning (LOWER).
      g.out[d] = (in[d] + g.stride[d] - 1) / g.stride[d];
      const std::int64_t total = std::max<std::int64_t>(0, (g.out[d] - 1) * g.stride[d] + extent - in[d]);
      g.pad_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_end[d] = total - g.pad_begin[d];
      continue;
    }
    const std::int64_t room = in[d] + g.pad_begin[d] + g.pad_end[d] - extent;
    if (room < 0) node.invalid("the window (span " + std::to_string(extent) + ") is larger than the padded input");
    g.out[d] = (ceil_mode ? (room + g.stride[d] - 1) / g.stride[d] : room / g.stride[d]) + 1;
    // Rounding up may add a window that starts past the input and its begin padding.
    if (ceil_mode && (g.out[d] - 1) * g.stride[d] >= in[d] + g.pad_begin[d]) --g.out[d];
  }
  return g;
}

std::vector<std::int64_t> window_sources(const WindowGeometry& g) {
  const std::size_t rank = g.rank();
  const std::int64_t taps = g.taps(), positions = g.positions();
  std::vector<std::int64_t> sources(static_cast<std::size_t>(taps * positions));
  const Shape field_strides = contiguous_strides(g.in);
  // One tap's row is the outer product over the dims of each dim's offsets (or -1), built
  // a dim at a time without a division per entry: large fields have millions of entries.
  std::vector<std::int64_t> row, next;
  Shape tap(rank, 0);
  for (std::int64_t k = 0; k < taps; ++k) {
    row.assign(1, 0);
    for (std::size_t d = 0; d < rank; ++d) {
      next.resize(row.size() * static_cast<std::size_t>(g.out[d]));
      std::size_t e = 0;
      for (const std::int64_t base : row) {
        for (std::int64_t o = 0; o < g.out[d]; ++o, ++e) {
          const std::int64_t i = o * g.stride[d] - g.pad_begin[d] + tap[d] * g.dilation[d];
          next[e] = base < 0 || i < 0 || i >= g.in[d] ? -1 : base + i * field_strides[d];
        }
      }
      row.swap(next);
    }
    std::copy(row.begin(), row.end(), sources.begin() + k * positions);
    for (std::size_t d = rank; d-- > 0;) {  // the next tap, row-major
      if (++tap[d] < g.kernel[d]) break;
      tap[d] = 0;
    }
  }
  return sources;
}

const std::vector<std::int64_t>& WindowTable::of(const WindowGeometry& g) {
  if (!built_ || !(g == geometry_)) {
    sources_ = window_sources(g);
    geometry_ = g;
    built_ = true;
  }
  return sources_;
}

template <class T>
void im2col_nd(const T* x, std::int64_t channels, const WindowGeometry& g, const std::vector<std::int64_t>& sources,
               std::int64_t begin, std::int64_t count, T* cols) {
  const std::int64_t field = g.field_size(), taps = g.taps(), positions = g.positions();
  for (std::int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * field;
    for (std::int64_t k = 0; k < taps; ++k) {
      const std::int64_t* from = sources.data() + k * positions + begin;
      T* out = cols + (c * taps + k) * count;
      for (std::int64_t q = 0; q < count; ++q) out[q] = from[q] >= 0 ? xc[from[q]] : T(0);
    }
  }
}

template <class T>
void col2im_add_nd(const T* cols, std::int64_t channels, const WindowGeometry& g,
                   const std::vector<std::int64_t>& sources, std::int64_t begin, std::int64_t count, T* x) {
  const std::int64_t field = g.field_size(), taps = g.taps(), positions = g.positions();
  for (std::int64_t c = 0; c < channels; ++c) {
    T* xc = x + c * field;
    for (std::int64_t k = 0; k < taps; ++k) {
      const std::int64_t* from = sources.data() + k * positions + begin;
      const T* in = cols + (c * taps + k) * count;
      for (std::int64_t q = 0; q < count; ++q) {
        if (from[q] >= 0) xc[from[q]] += in[q];
      }
    }
  }
}

template void im2col_nd<float>(const float*, std::int64_t, const WindowGeometry&, const std::vector<std::int64_t>&,
                               std::int64_t, std::int64_t, float*);
template void im2col_nd<double>(const double*, std::int64_t, const WindowGeometry&, const std::vector<std::int64_t>&,
                                std::int64_t, std::int64_t, double*);
template void col2im_add_nd<float>(const float*, std::int64_t, const WindowGeometry&, const std::vector<std::int64_t>&,
                                   std::int64_t, std::int64_t, float*);
template void col2im_add_nd<double>(const double*, std::int64_t, const WindowGeometry&,
                                    const std::vector<std::int64_t>&, std::int64_t, std::int64_t, double*);

namespace {
std::atomic<std::int64_t> chunk_elements{std::int64_t{1} << 22};
}  // namespace

std::int64_t im2col_chunk_elements() noexcept { return chunk_elements.load(std::memory_order_relaxed); }

void set_im2col_chunk_elements(std::int64_t elements) {
  if (elements < 1) throw InvalidArgument("onnx::set_im2col_chunk_elements: expected at least 1 element");
  chunk_elements.store(elements, std::memory_order_relaxed);
}

const Tensor& floating_input(const NodeSpec& node, const Value& value, const char* what) {
  if (!value.defined()) node.invalid(std::string("the input ") + what + " is missing");
  if (!is_floating(value.type)) {
    node.unsupported(std::string("the input ") + what + " of type " + std::string(element_type_name(value.type)));
  }
  return value.tensor;
}

}  // namespace tessera::onnx
