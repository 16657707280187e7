// Peak host memory of a decoder training step with and without activation checkpointing
// (issue 22 item 2): the measured drop must be at least half the drop that the memory
// plan's estimate (models::decoder_activation_bytes) predicts, and at most 1.5 times it.
//
// The peak is the process's resident high-water mark (VmHWM in /proc/self/status), so
// each variant runs in a process of its own: the program starts itself twice
// (`--variant none`, `--variant blocks`) and compares what the two print. Everything but
// the activations is the same in both, so the difference of the peaks is the saving. No
// MPI: the serial decoder needs no communicator.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <malloc.h>
#include <unistd.h>

#include "tessera/models/decoder.hpp"
#include "tessera/nn/activation_checkpoint.hpp"
#include "tessera/ops.hpp"

using namespace tessera;

namespace {

constexpr std::int64_t kBatch = 2, kSeq = 256;

models::DecoderConfig config() {
  models::DecoderConfig a;
  a.vocab = 256;
  a.d_model = 256;
  a.n_heads = 4;
  a.hidden = 512;
  a.n_layers = 6;
  return a;
}

std::int64_t peak_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// One forward and backward of the decoder; prints the peak in KiB.
int run_variant(const std::string& policy_text) {
  // Large blocks straight from and back to the system (no dynamic mmap threshold): the
  // resident peak then follows the live tensors rather than the heap's fragmentation.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  const nn::CheckpointPolicy policy = nn::CheckpointPolicy::parse(policy_text, "--variant");
  models::Decoder model(config());
  nn::initialize_parameters(model, 7);
  (void)models::checkpoint_activations(model, policy);
  std::vector<std::int64_t> ids(kBatch * kSeq);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((31 * i + 7) % config().vocab);
  const Tensor logits = model.forward(Tensor::from_vector(ids, {kBatch, kSeq}));
  Tensor grad = logits.clone();  // the gradient of 0.5e-3 |logits|^2
  ops::scale(grad, 1e-3);
  (void)model.backward(grad);
  std::printf("peak_kib %lld\n", static_cast<long long>(peak_kib()));
  return 0;
}

// Runs this program with `--variant <policy>` and returns the peak it reports (KiB).
std::int64_t peak_of(const std::string& self, const std::string& policy) {
  const std::string command = "'" + self + "' --variant '" + policy + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::fprintf(stderr, "cannot run %s\n", command.c_str());
    return -1;
  }
  long long kib = -1;
  char line[256];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    if (std::sscanf(line, "peak_kib %lld", &kib) == 1) break;
  }
  const int status = pclose(pipe);
  if (status != 0) {
    std::fprintf(stderr, "%s failed (status %d)\n", command.c_str(), status);
    return -1;
  }
  return kib;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--variant") == 0) return run_variant(argv[2]);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "cannot find this program's path\n");
    return 1;
  }
  self[n] = '\0';
  const std::int64_t none = peak_of(self, "none"), blocks = peak_of(self, "blocks");
  if (none <= 0 || blocks <= 0) return 1;
  const std::int64_t measured = (none - blocks) * 1024;
  const std::int64_t estimated =
      kBatch * (models::decoder_activation_bytes(config(), kSeq, 1, false) -
                models::decoder_activation_bytes(config(), kSeq, 1, false, nn::CheckpointPolicy{1}));
  std::printf("peak without checkpointing %.1f MiB, with (blocks) %.1f MiB: measured drop %.1f MiB, estimated %.1f MiB\n",
              none / 1024.0, blocks / 1024.0, measured / 1048576.0, estimated / 1048576.0);
  if (estimated <= 0 || 2 * measured < estimated) {
    std::printf("FAIL: the measured drop is less than half the estimate\n");
    return 1;
  }
  // Nor far above it: the plan must not hide most of the saving either.
  if (2 * measured > 3 * estimated) {
    std::printf("FAIL: the measured drop exceeds the estimate by more than half\n");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
