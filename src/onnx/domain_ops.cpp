// The ops of nodes that read split values (domain_ops.hpp).
#include "onnx/domain_ops.hpp"

#include <cmath>

#include "tessera/agree.hpp"
#include "tessera/error.hpp"
#include "tessera/ops.hpp"

namespace tessera::onnx {

// The whole inputs' gradients are this block's share: summed over the ranks (a copy
// first: an op may hand back a tensor it shares with another input's gradient).
std::vector<Tensor> SplitOp::backward(const std::vector<Tensor>& grad_outputs) {
  std::vector<Tensor> grads = split_backward(grad_outputs);
  for (std::size_t i = 0; i < grads.size() && i < inputs_.size(); ++i) {
    if (!grads[i].defined() || !inputs_[i].is_whole()) continue;
    grads[i] = grads[i].clone();
    comm_->all_reduce(grads[i]);
  }
  return grads;
}

// ---- LocalOp

LocalOp::LocalOp(std::unique_ptr<Op> op, std::vector<Layout> inputs, Communicator& comm, LayoutRule rule)
    : SplitOp(op->node(), std::move(inputs), comm), op_(std::move(op)), rule_(std::move(rule)) {}

std::vector<Value> LocalOp::forward(const std::vector<Value>& inputs) {
  if (!outputs_.empty()) return op_->forward(inputs);
  // The first forward decides the output layouts from this rank's shapes (a Reshape's
  // target): a refusal or a shape error on one rank must fail every rank, before any of
  // them goes on into the next node's halo exchange.
  std::vector<Value> outputs;
  agree_on_success(comm_->mpi_comm(), [&] {
    outputs = op_->forward(inputs);
    outputs_ = rule_(inputs, outputs);
  });
  return outputs;
}

std::vector<Tensor> LocalOp::split_backward(const std::vector<Tensor>& grad_outputs) {
  return op_->backward(grad_outputs);
}

// ---- HaloOp

HaloOp::HaloOp(std::unique_ptr<Op> op, std::vector<Layout> inputs, Communicator& comm, std::unique_ptr<SplitHalo> halo,
               Layout output, HaloCrop crop, InputRewrite rewrite)
    : SplitOp(op->node(), std::move(inputs), comm), op_(std::move(op)), halo_(std::move(halo)), crop_(crop),
      rewrite_(std::move(rewrite)) {
  outputs_ = {std::move(output)};
}

std::vector<Value> HaloOp::forward(const std::vector<Value>& inputs) {
  std::vector<Value> local = inputs;
  if (halo_) local[0].tensor = halo_->pad(inputs[0].tensor);
  if (rewrite_) rewrite_(local, local[0].tensor);
  std::vector<Value> outputs = op_->forward(local);
  haloed_output_shape_ = outputs[0].shape();
  if (crop_.lat != 0 || crop_.lon != 0) {
    Tensor& y = outputs[0].tensor;
    const int d = y.dim();
    y = y.narrow(d - 2, crop_.lat, y.size(d - 2) - 2 * crop_.lat)
            .narrow(d - 1, crop_.lon, y.size(d - 1) - 2 * crop_.lon)
            .contiguous();
  }
  return outputs;
}

std::string HaloOp::describe() const {
  if (!halo_) return "local on the block";
  const auto& e = halo_->edges();
  std::string out = "halo lat " + std::to_string(e[0].width) + "+" + std::to_string(e[1].width) + ", lon " +
                    std::to_string(e[2].width) + "+" + std::to_string(e[3].width);
  if (crop_.lat != 0 || crop_.lon != 0) out += ", cropped";
  return out;
}

std::vector<Tensor> HaloOp::split_backward(const std::vector<Tensor>& grad_outputs) {
  std::vector<Tensor> grads = grad_outputs;
  if ((crop_.lat != 0 || crop_.lon != 0) && grads[0].defined()) {
    Tensor full = Tensor::zeros(haloed_output_shape_, grads[0].dtype());
    const int d = full.dim();
    full.narrow(d - 2, crop_.lat, grads[0].size(d - 2)).narrow(d - 1, crop_.lon, grads[0].size(d - 1)).copy_from(grads[0]);
    grads[0] = full;
  }
  std::vector<Tensor> grad_inputs = op_->backward(grads);
  if (halo_ && !grad_inputs.empty() && grad_inputs[0].defined()) {
    grad_inputs[0] = halo_->unpad_adjoint(grad_inputs[0].contiguous());
  }
  return grad_inputs;
}

// ---- GlobalSumOp

GlobalSumOp::GlobalSumOp(std::unique_ptr<Op> op, std::vector<Layout> inputs, Communicator& comm, double weight)
    : SplitOp(op->node(), std::move(inputs), comm), op_(std::move(op)), weight_(weight) {
  outputs_ = {Layout::whole()};
}

std::vector<Value> GlobalSumOp::forward(const std::vector<Value>& inputs) {
  std::vector<Value> outputs = op_->forward(inputs);
  Tensor y = outputs[0].tensor.clone();
  if (weight_ != 1.0) ops::scale(y, weight_);
  comm_->all_reduce(y);
  outputs[0].tensor = y;
  return outputs;
}

std::vector<Tensor> GlobalSumOp::split_backward(const std::vector<Tensor>& grad_outputs) {
  std::vector<Tensor> grads = grad_outputs;
  if (weight_ != 1.0 && grads[0].defined()) {
    grads[0] = grads[0].clone();
    ops::scale(grads[0], weight_);
  }
  return op_->backward(grads);
}

// ---- SplitInstanceNormOp

SplitInstanceNormOp::SplitInstanceNormOp(const NodeSpec& node, std::vector<Layout> inputs, Communicator& comm)
    : SplitOp(node, std::move(inputs), comm), epsilon_(node.get_float("epsilon", 1e-5)) {
  outputs_ = {inputs_[0]};
}

std::vector<Value> SplitInstanceNormOp::forward(const std::vector<Value>& inputs) {
  if (inputs.size() != 3 || inputs[0].tensor.dim() < 3) node_.invalid("InstanceNormalization needs X of rank 3 or more, scale and B");
  x_shape_ = inputs[0].shape();
  dtype_ = inputs[0].tensor.dtype();
  planes_ = x_shape_[0] * x_shape_[1];
  plane_ = planes_ == 0 ? 0 : inputs[0].numel() / planes_;
  Tensor count = Tensor::from_vector(std::vector<double>{static_cast<double>(plane_)}, {1});
  comm_->all_reduce(count);
  count_ = count.to_vector<double>()[0];
  return dtype_ == DType::f32 ? forward_typed<float>(inputs) : forward_typed<double>(inputs);
}

// Per (n, c): mean and variance over the whole field, two passes, each a sum over ranks.
template <class T>
std::vector<Value> SplitInstanceNormOp::forward_typed(const std::vector<Value>& inputs) {
  const T* x = inputs[0].tensor.data<T>();
  scale_ = inputs[1].tensor.contiguous();
  const T* scale = scale_.data<T>();
  const Tensor bias_t = inputs[2].tensor.contiguous();
  const T* bias = bias_t.data<T>();
  const std::int64_t channels = x_shape_[1];
  Tensor sums = Tensor::zeros({planes_}, DType::f64);
  double* s = sums.data<double>();
  for (std::int64_t p = 0; p < planes_; ++p) {
    for (std::int64_t k = 0; k < plane_; ++k) s[p] += x[p * plane_ + k];
  }
  comm_->all_reduce(sums);
  std::vector<double> mean(planes_);
  for (std::int64_t p = 0; p < planes_; ++p) mean[p] = sums.data<double>()[p] / count_;
  Tensor squares = Tensor::zeros({planes_}, DType::f64);
  double* q = squares.data<double>();
  for (std::int64_t p = 0; p < planes_; ++p) {
    for (std::int64_t k = 0; k < plane_; ++k) {
      const double d = x[p * plane_ + k] - mean[p];
      q[p] += d * d;
    }
  }
  comm_->all_reduce(squares);
  inv_std_.assign(planes_, 0.0);
  xhat_.assign(static_cast<std::size_t>(planes_ * plane_), 0.0);
  Tensor y = Tensor::empty(x_shape_, dtype_);
  T* out = y.data<T>();
  for (std::int64_t p = 0; p < planes_; ++p) {
    inv_std_[p] = 1.0 / std::sqrt(squares.data<double>()[p] / count_ + epsilon_);
    const std::int64_t c = p % channels;
    for (std::int64_t k = 0; k < plane_; ++k) {
      const double h = (x[p * plane_ + k] - mean[p]) * inv_std_[p];
      xhat_[p * plane_ + k] = h;
      out[p * plane_ + k] = static_cast<T>(h * scale[c] + bias[c]);
    }
  }
  return {Value::floating(y)};
}

std::vector<Tensor> SplitInstanceNormOp::split_backward(const std::vector<Tensor>& grad_outputs) {
  if (!grad_outputs[0].defined()) return {Tensor{}, Tensor{}, Tensor{}};
  const Tensor grad = grad_outputs[0].contiguous();
  return dtype_ == DType::f32 ? backward_typed<float>(grad) : backward_typed<double>(grad);
}

// dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * scale and the means
// over the whole field; the scale's and bias's gradients are this block's share.
template <class T>
std::vector<Tensor> SplitInstanceNormOp::backward_typed(const Tensor& grad) {
  const T* dy = grad.data<T>();
  const T* scale = scale_.data<T>();
  const std::int64_t channels = x_shape_[1];
  Tensor sums = Tensor::zeros({2 * planes_}, DType::f64);
  double* s = sums.data<double>();
  std::vector<double> dscale(channels, 0.0), dbias(channels, 0.0);
  for (std::int64_t p = 0; p < planes_; ++p) {
    const std::int64_t c = p % channels;
    for (std::int64_t k = 0; k < plane_; ++k) {
      const double g = dy[p * plane_ + k], h = xhat_[p * plane_ + k];
      s[2 * p] += g * scale[c];
      s[2 * p + 1] += g * scale[c] * h;
      dscale[c] += g * h;
      dbias[c] += g;
    }
  }
  comm_->all_reduce(sums);
  Tensor dx = Tensor::empty(x_shape_, dtype_);
  T* out = dx.data<T>();
  for (std::int64_t p = 0; p < planes_; ++p) {
    const std::int64_t c = p % channels;
    const double mean_g = sums.data<double>()[2 * p] / count_, mean_gh = sums.data<double>()[2 * p + 1] / count_;
    for (std::int64_t k = 0; k < plane_; ++k) {
      const double g = dy[p * plane_ + k] * scale[c];
      out[p * plane_ + k] = static_cast<T>(inv_std_[p] * (g - mean_g - xhat_[p * plane_ + k] * mean_gh));
    }
  }
  const Shape param_shape = scale_.shape();
  Tensor dscale_t = Tensor::from_vector(std::vector<T>(dscale.begin(), dscale.end()), param_shape);
  Tensor dbias_t = Tensor::from_vector(std::vector<T>(dbias.begin(), dbias.end()), param_shape);
  return {dx, dscale_t, dbias_t};
}

// ---- PassOp

PassOp::PassOp(const NodeSpec& node, std::vector<Layout> inputs, Communicator& comm, std::size_t source, Layout output)
    : SplitOp(node, std::move(inputs), comm), source_(source) {
  outputs_ = {std::move(output)};
}

std::vector<Value> PassOp::forward(const std::vector<Value>& inputs) {
  inputs_count_ = inputs.size();
  return {inputs[source_]};
}

std::vector<Tensor> PassOp::split_backward(const std::vector<Tensor>& grad_outputs) {
  std::vector<Tensor> grads(inputs_count_);
  grads[source_] = grad_outputs[0];
  return grads;
}

}  // namespace tessera::onnx
