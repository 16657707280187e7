// Global gradient-norm clipping (clip.hpp): local sums of squares weighted by the
// inverse replication count (computed on each gradient's device, compute.hpp), one
// all-reduce, then a local scale on the device.

#include "tessera/clip.hpp"

#include <cmath>
#include <exception>
#include <sstream>

#include "backend/compute.hpp"
#include "tessera/agree.hpp"
#include "tessera/error.hpp"

namespace tessera {

namespace {

using NamedParams = std::vector<std::pair<std::string, Parameter*>>;

std::string num(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

const Tensor& checked_grad(const std::string& name, const Parameter* p, const char* op) {
  const std::string who = std::string(op) + ": parameter '" + name + "'";
  if (p == nullptr) throw InvalidArgument(who + " is null");
  const Tensor& g = p->grad;
  if (!g.defined()) throw InvalidArgument(who + " has no gradient");
  require_usable(g, who + ": gradient");
  if (g.dtype() != DType::f32 && g.dtype() != DType::f64 && g.dtype() != DType::bf16) {
    throw ShapeError(who + ": gradient " + g.str() + " must be f32, f64 or bf16");
  }
  if (!g.is_contiguous()) throw ShapeError(who + ": gradient " + g.str() + " must be contiguous");
  return g;
}

// Sum of squares of one gradient, in double, on the gradient's device.
double sum_squares(const Tensor& g) {
  return detail::compute_for(g, "clip_grad_norm: gradient").sum_squares(g.dtype(), g.data(), g.numel(),
                                                                        g.device().index);
}

void scale_grad(Tensor& g, double factor) {
  detail::compute_for(g, "clip_grad_norm: gradient").scale(g.dtype(), g.numel(), factor, g.data(), g.device().index);
}

void check_max_norm(double max_norm) {
  if (!(max_norm >= 0) || !std::isfinite(max_norm)) {
    throw InvalidArgument("clip_grad_norm: max_norm = " + num(max_norm) + " must be a finite value >= 0");
  }
}

// How many ranks of the mesh hold an identical copy of this parameter's local block.
double replication_count(const Parameter& p, const Mesh& mesh) {
  double r = 1;
  for (MeshDim d : {MeshDim::dp, MeshDim::tp, MeshDim::domain}) {
    if (p.placement[d].is_replicate()) r *= mesh.size(d);
  }
  return r;
}

// A frozen parameter (trainable = false) takes no part, as a parameter without a
// gradient in PyTorch: its gradient may be undefined, and is neither counted nor scaled.
bool frozen(const Parameter* p) { return p != nullptr && !p->trainable; }

// torch.nn.utils.clip_grad_norm_'s rule; non-finite norms leave the gradients alone.
void apply_clip(const NamedParams& params, double norm, double max_norm) {
  if (!std::isfinite(norm)) return;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return;
  for (const auto& [name, p] : params) {
    if (!frozen(p)) scale_grad(p->grad, coef);
  }
}

// The squared global norm: with a mesh, one all-reduce over mesh->world(); without one,
// purely local (max_norm is then validated by the caller).
double squared_norm(const NamedParams& params, const Mesh* mesh, const char* op, double max_norm) {
  if (mesh == nullptr) {
    double total = 0;
    for (const auto& [name, p] : params) {
      if (frozen(p)) continue;
      const Tensor& g = checked_grad(name, p, op);
      if (g.shape() != p->global_shape) {
        throw InvalidArgument(std::string(op) + ": parameter '" + name + "' holds the block " + g.str() +
                              " of global shape " + shape_str(p->global_shape) + " (placement " +
                              p->placement.str() + "); pass the Mesh to count shards and replicas");
      }
      total += sum_squares(g);
    }
    return total;
  }

  // Local work may fail on one rank only (a bad gradient); fold a failure flag into the
  // one all-reduce so the success path costs a single collective, and agree on the
  // error (extra collectives) only when some rank failed.
  std::exception_ptr failure;
  double partial = 0;
  try {
    check_max_norm(max_norm);
    for (const auto& [name, p] : params) {
      if (frozen(p)) continue;
      const Tensor& g = checked_grad(name, p, op);
      partial += sum_squares(g) / replication_count(*p, *mesh);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  Tensor buffer = Tensor::from_vector<double>({partial, failure ? 1.0 : 0.0}, {2});
  mesh->world().all_reduce(buffer, ReduceOp::sum);
  const std::vector<double> reduced = buffer.to_vector<double>();
  if (reduced[1] != 0.0) {
    agree_on_success(mesh->world().mpi_comm(), [&] {
      if (failure) std::rethrow_exception(failure);
    });
    throw InternalError(std::string(op) + ": a rank reported a failure that was not agreed on");
  }
  return reduced[0];
}

}  // namespace

double global_grad_norm(const NamedParams& params, const Mesh& mesh) {
  return std::sqrt(squared_norm(params, &mesh, "global_grad_norm", 0.0));
}

double clip_grad_norm(const NamedParams& params, double max_norm, const Mesh& mesh) {
  const double norm = std::sqrt(squared_norm(params, &mesh, "clip_grad_norm", max_norm));
  apply_clip(params, norm, max_norm);
  return norm;
}

double global_grad_norm(const NamedParams& params) {
  return std::sqrt(squared_norm(params, nullptr, "global_grad_norm", 0.0));
}

double clip_grad_norm(const NamedParams& params, double max_norm) {
  check_max_norm(max_norm);
  const double norm = std::sqrt(squared_norm(params, nullptr, "clip_grad_norm", max_norm));
  apply_clip(params, norm, max_norm);
  return norm;
}

}  // namespace tessera
