// tessera-ckpt: the checkpoint inspector (docs/checkpoint-format.md) and converter
// (docs/pytorch.md).
//
//   tessera-ckpt info   PATH            header, tensor tree with shapes, dtypes, placements
//   tessera-ckpt verify PATH            recompute every checksum (and each slice's); NaN/Inf fail
//   tessera-ckpt merge  PATH OUTPUT.h5  one self-contained file from any layout
//   tessera-ckpt diff   PATH_A PATH_B   max abs difference per tensor
//   tessera-ckpt manifest PATH          list a trusted copy's unlisted files in its MANIFEST
//   tessera-ckpt import IN.safetensors ROOT [options]   PyTorch weights -> a checkpoint
//   tessera-ckpt export PATH OUT.safetensors [options]  master weights -> PyTorch
//   tessera-ckpt import-hf DIR ROOT [options]           a Hugging Face Llama directory -> a checkpoint
//   tessera-ckpt export-hf PATH DIR [--dtype D]         a decoder checkpoint -> a Hugging Face directory
//
// PATH is a checkpoint.h5, a step directory or a root directory (its `latest`).
// Exit status: 0 success (diff: identical), 1 verify found problems (diff: the
// checkpoints differ), 2 usage or I/O error.

#include <mpi.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "convert.hpp"
#include "tessera/error.hpp"
#include "tessera/io/checkpoint_reader.hpp"

using namespace tessera;
using namespace tessera::io;

namespace {

int usage() {
  std::cerr << "usage: tessera-ckpt info PATH\n"
               "       tessera-ckpt verify PATH\n"
               "       tessera-ckpt merge PATH OUTPUT.h5\n"
               "       tessera-ckpt diff PATH_A PATH_B\n"
               "       tessera-ckpt manifest STEP_DIR|FILE.h5\n"
               "       tessera-ckpt import IN.safetensors OUTPUT_ROOT [--mapping MAP.yaml] [--metadata META.yaml]\n"
               "                           [--dtype f32|f64|bf16] [--step N] [--layout shared|per_rank]\n"
               "                           [--partial true]\n"
               "       tessera-ckpt export PATH OUT.safetensors [--format safetensors] [--mapping MAP.yaml]\n"
               "       tessera-ckpt import-hf DIR OUTPUT_ROOT [--step N] [--layout shared|per_rank]\n"
               "       tessera-ckpt export-hf PATH DIR [--dtype f32|bf16|f64]\n";
  return 2;
}

std::vector<std::string> split_name(const std::string& name) {
  std::vector<std::string> parts;
  std::stringstream in(name);
  for (std::string part; std::getline(in, part, '.');) parts.push_back(part);
  return parts;
}

std::string hex(std::uint64_t v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "0x%016" PRIx64, v);
  return buffer;
}

int info(const std::string& path) {
  const CheckpointReader reader(path);
  const CheckpointHeader& h = reader.header();
  std::cout << "file: " << reader.file() << "\n"
            << "format: " << h.format << " version " << h.format_version << " (written by tessera "
            << h.tessera_version << ")\n"
            << "layout: " << checkpoint_layout_name(h.layout);
  if (h.layout == CheckpointLayout::per_rank) {
    std::cout << " (" << h.writer_ranks.size() << " slice files:";
    for (auto r : h.writer_ranks) std::cout << " " << rank_file_name(r);
    std::cout << ")";
  }
  std::cout << "\n"
            << "mesh: data " << data_parallel_mode_name(h.mesh.data) << ", dp " << h.dp << ", tp " << h.mesh.tensor
            << ", domain " << h.mesh.domain << " (world size " << h.world_size << "), pipeline " << h.mesh.pipeline
            << "\n"
            << "step: " << h.step << "\n"
            << "checksum: " << h.checksum_algorithm << "\n";
  if (h.optimizer_type.empty()) {
    std::cout << "optimizer: none\n";
  } else {
    std::cout << "optimizer: " << h.optimizer_type << ", step_count " << h.optimizer_step_count << "\n";
  }
  if (h.metadata.empty()) {
    std::cout << "metadata: (none)\n";
  } else {
    std::cout << "metadata:\n";
    std::stringstream in(h.metadata);
    for (std::string line; std::getline(in, line);) std::cout << "  | " << line << "\n";
  }
  // The tree: FQN components become levels, in the order the tensors were saved.
  std::string section;
  std::vector<std::string> previous;
  std::size_t count = 0;
  for (const DatasetInfo& d : reader.datasets()) {
    if (d.section != section) {
      section = d.section;
      previous.clear();
      std::cout << "/" << section << "\n";
    }
    const auto parts = split_name(d.name);
    std::size_t common = 0;
    while (common + 1 < parts.size() && common < previous.size() && parts[common] == previous[common]) ++common;
    for (std::size_t level = common; level + 1 < parts.size(); ++level) {
      std::cout << std::string(2 * (level + 1), ' ') << parts[level] << "\n";
    }
    std::cout << std::string(2 * parts.size(), ' ') << parts.back() << "  " << dtype_name(d.dtype)
              << shape_str(d.shape) << "  {" << d.placement << "}  checksum " << hex(d.checksum) << "\n";
    previous.assign(parts.begin(), parts.end() - 1);
    ++count;
  }
  std::cout << count << " tensors\n";
  return 0;
}

int verify(const std::string& path) {
  const VerifyReport report = verify_checkpoint(path);
  for (const auto& p : report.passed) std::cout << "ok    " << p << "\n";
  for (const auto& f : report.failed) std::cout << "FAIL  " << f << "\n";
  if (report.ok()) {
    std::cout << "verify: all " << report.passed.size() << " datasets ok\n";
    return 0;
  }
  std::cout << "verify: " << report.failed.size() << " problem(s)\n";
  return 1;
}

int merge(const std::string& path, const std::string& output) {
  merge_checkpoint(path, output);
  const CheckpointReader merged(output);
  std::cout << "merged " << CheckpointReader(path).file() << " into " << output << " ("
            << merged.datasets().size() << " datasets, layout " << checkpoint_layout_name(merged.header().layout)
            << ")\n";
  return 0;
}

// For a copy the user trusts: its MANIFEST gets the files it lacks, so the checks that
// come before HDF5 opens anything can run (docs/checkpoint-format.md, "The MANIFEST").
int manifest(const std::string& path) {
  const auto added = write_checkpoint_manifest(path);
  for (const auto& name : added) std::cout << "listed " << name << "\n";
  std::cout << "manifest: " << added.size() << " file(s) added; check the datasets with: tessera-ckpt verify "
            << path << "\n";
  return 0;
}

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  switch (t.dtype()) {
    case DType::f32: {
      const auto v = t.to_vector<float>();
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i];
      break;
    }
    case DType::f64: out = t.to_vector<double>(); break;
    case DType::bf16: {
      const auto v = t.to_vector<bfloat16>();
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
      break;
    }
    case DType::i64: {
      const auto v = t.to_vector<std::int64_t>();
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(v[i]);
      break;
    }
  }
  return out;
}

int diff(const std::string& path_a, const std::string& path_b) {
  const CheckpointReader a(path_a), b(path_b);
  std::cout << "A: " << a.file() << "\nB: " << b.file() << "\n";
  bool differ = false;
  std::set<std::string> seen;
  for (const DatasetInfo& da : a.datasets()) {
    seen.insert(da.path);
    const DatasetInfo* db = b.find(da.path);
    if (db == nullptr) {
      std::cout << da.path << "  only in A\n";
      differ = true;
      continue;
    }
    if (da.shape != db->shape || da.dtype != db->dtype) {
      std::cout << da.path << "  A " << dtype_name(da.dtype) << shape_str(da.shape) << " vs B "
                << dtype_name(db->dtype) << shape_str(db->shape) << "\n";
      differ = true;
      continue;
    }
    const auto va = as_doubles(a.read(da));
    const auto vb = as_doubles(b.read(*db));
    double max_diff = 0;
    for (std::size_t i = 0; i < va.size(); ++i) {
      const double d = std::fabs(va[i] - vb[i]);
      if (d > max_diff || std::isnan(d)) max_diff = std::isnan(d) ? NAN : d;
      if (std::isnan(max_diff)) break;
    }
    if (max_diff != 0) differ = true;
    std::cout << da.path << "  max_abs_diff " << max_diff << "\n";
  }
  for (const DatasetInfo& db : b.datasets()) {
    if (!seen.count(db.path)) {
      std::cout << db.path << "  only in B\n";
      differ = true;
    }
  }
  std::cout << (differ ? "diff: the checkpoints differ\n" : "diff: identical\n");
  return differ ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 2;
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 2 && args[0] == "info") {
      status = info(args[1]);
    } else if (args.size() == 2 && args[0] == "verify") {
      status = verify(args[1]);
    } else if (args.size() == 3 && args[0] == "merge") {
      status = merge(args[1], args[2]);
    } else if (args.size() == 3 && args[0] == "diff") {
      status = diff(args[1], args[2]);
    } else if (args.size() == 2 && args[0] == "manifest") {
      status = manifest(args[1]);
    } else if (!args.empty() && args[0] == "import") {
      status = ckpt::import_command({args.begin() + 1, args.end()});
    } else if (!args.empty() && args[0] == "export") {
      status = ckpt::export_command({args.begin() + 1, args.end()});
    } else if (!args.empty() && args[0] == "import-hf") {
      status = ckpt::import_hf_command({args.begin() + 1, args.end()});
    } else if (!args.empty() && args[0] == "export-hf") {
      status = ckpt::export_hf_command({args.begin() + 1, args.end()});
    } else {
      status = usage();
    }
  } catch (const std::exception& e) {
    std::cerr << "tessera-ckpt: error: " << e.what() << "\n";
    status = 2;
  }
  MPI_Finalize();
  return status;
}
