// The tessera half of check_embedding_torch.py: replays each case file (a table, ids and
// output gradients, with torch.nn.Embedding's outputs, renormalised tables and
// gradients after every step) on nn::Embedding, ParallelEmbedding and
// VocabParallelEmbedding at this launch's rank count (all ranks form the tp group), with
// the same plain SGD update between steps, and compares everything with torch.
//
//   mpiexec -n N embedding_torch_parity CASE.txt...
//
// Exit 0 when every value is within the bound, 1 otherwise, 2 on an error.

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/error.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/ops.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/sharding.hpp"

using namespace tessera;

namespace {

constexpr std::int64_t kVocab = 8, kDim = 8;

// "key v1 v2 ..." lines; repeated keys (one per step) keep their order.
struct CaseFile {
  std::string path;
  std::multimap<std::string, std::vector<std::string>> lines;

  explicit CaseFile(const std::string& file) : path(file) {
    std::ifstream in(file);
    if (!in) throw IoError("embedding_torch_parity: cannot open " + file);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string key, word;
      words >> key;
      std::vector<std::string> values;
      while (words >> word) values.push_back(word);
      lines.emplace(key, values);
    }
  }
  const std::vector<std::string>& at(const std::string& key, std::size_t step = 0) const {
    auto range = lines.equal_range(key);
    for (auto it = range.first; it != range.second; ++it, --step)
      if (step == 0) return it->second;
    throw InvalidArgument("embedding_torch_parity: " + path + " has no line '" + key + "' for step " +
                          std::to_string(step));
  }
  std::string word(const std::string& key) const { return at(key).at(0); }
  std::vector<double> numbers(const std::string& key, std::size_t step = 0) const {
    std::vector<double> out;
    for (const auto& w : at(key, step)) out.push_back(std::strtod(w.c_str(), nullptr));  // "inf" included
    return out;
  }
};

Tensor tensor_of(const std::vector<double>& v, const Shape& shape, DType dtype) {
  if (dtype == DType::f64) return Tensor::from_vector(v, shape);
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

std::vector<double> values_of(const Tensor& t) {
  const Tensor c = t.to(Device::host()).contiguous();
  if (c.dtype() == DType::f64) return c.to_vector<double>();
  const auto f = c.to_vector<float>();
  return {f.begin(), f.end()};
}

// max |got - want| / max(1, max |want|).
double error_of(const Tensor& got, const std::vector<double>& want) {
  const auto g = values_of(got);
  if (g.size() != want.size()) return INFINITY;
  double scale = 1, worst = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - want[i]));
  return std::isnan(worst) ? INFINITY : worst / scale;
}

// Worst relative error over the case's steps for the serial and both tp layers.
struct Errors {
  double serial = 0, by_dim = 0, by_vocab = 0;
};

Errors run_case(const CaseFile& c, Communicator& tp) {
  const DType dtype = c.word("dtype") == "f64" ? DType::f64 : DType::f32;
  nn::EmbeddingOptions o;
  if (c.word("padding_idx") != "none") o.padding_idx = std::stoll(c.word("padding_idx"));
  if (c.word("max_norm") != "none") o.max_norm = c.numbers("max_norm")[0];
  o.norm_type = c.numbers("norm_type")[0];
  o.scale_grad_by_freq = c.word("scale_grad_by_freq") == "1";
  const double lr = c.numbers("lr")[0];
  std::vector<std::int64_t> id_values;
  for (double v : c.numbers("ids")) id_values.push_back(static_cast<std::int64_t>(v));
  const Tensor ids = Tensor::from_vector(id_values, {2, 5});

  nn::Embedding serial(kVocab, kDim, o, dtype);
  serial.weight.value.copy_from(tensor_of(c.numbers("weight"), {kVocab, kDim}, dtype));
  auto by_dim = tp::ParallelEmbedding::from_serial(serial, tp, "embed");
  auto by_vocab = tp::VocabParallelEmbedding::from_serial(serial, tp, "embed");

  Errors e;
  const int steps = std::stoi(c.word("steps"));
  for (int step = 0; step < steps; ++step) {
    const Tensor dy = tensor_of(c.numbers("dy", step), {2, 5, kDim}, dtype);
    const auto y = c.numbers("y", step), renormed = c.numbers("renormed", step), grad = c.numbers("grad", step);
    serial.zero_grad();
    by_dim->zero_grad();
    by_vocab->zero_grad();
    const Tensor y_serial = serial.forward(ids), y_dim = by_dim->forward(ids), y_vocab = by_vocab->forward(ids);
    serial.backward(dy);
    by_dim->backward(dy);
    by_vocab->backward(dy);
    const Tensor grad_dim = tp::assemble_master(by_dim->weight, by_dim->weight.grad, tp);
    const Tensor grad_vocab = tp::assemble_master(by_vocab->weight, by_vocab->weight.grad, tp);
    e.serial = std::max({e.serial, error_of(y_serial, y), error_of(serial.weight.value, renormed),
                         error_of(serial.weight.grad, grad)});
    e.by_dim = std::max({e.by_dim, error_of(y_dim, y), error_of(by_dim->master_weight(), renormed),
                         error_of(grad_dim, grad)});
    e.by_vocab = std::max({e.by_vocab, error_of(y_vocab, y), error_of(by_vocab->master_weight(), renormed),
                           error_of(grad_vocab, grad)});
    // torch: weight -= lr * grad, on each layer's own shard.
    for (Parameter* p : {&serial.weight, &by_dim->weight, &by_vocab->weight}) ops::axpy(-lr, p->grad, p->value);
  }
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 2, rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    if (argc < 2) throw InvalidArgument("usage: embedding_torch_parity CASE.txt...");
    Communicator tp(MPI_COMM_WORLD);
    status = 0;
    for (int i = 1; i < argc; ++i) {
      const CaseFile c(argv[i]);
      Errors e = run_case(c, tp);
      double worst[3] = {e.serial, e.by_dim, e.by_vocab};
      MPI_Allreduce(MPI_IN_PLACE, worst, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      // f64 follows torch's arithmetic to rounding; f32 rounds the norm and the factor in
      // float where tessera keeps them in double.
      const double bound = c.word("dtype") == "f64" ? 1e-12 : 2e-6;
      const bool ok = worst[0] <= bound && worst[1] <= bound && worst[2] <= bound;
      if (!ok) status = 1;
      if (rank == 0) {
        std::printf("%-28s tp=%d %s: max rel error serial %.2e, ParallelEmbedding %.2e, "
                    "VocabParallelEmbedding %.2e (bound %.0e): %s\n",
                    c.word("name").c_str(), tp.size(), c.word("dtype").c_str(), worst[0], worst[1], worst[2], bound,
                    ok ? "ok" : "FAIL");
      }
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "embedding_torch_parity (rank %d): %s\n", rank, ex.what());
    status = 2;
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return status;
}
