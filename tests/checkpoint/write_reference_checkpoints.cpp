// Fixture for the h5py and tessera-ckpt tests: at tp = world size, saves the test model
// (with a bf16 layer) and its AdamW state in both layouts under OUTDIR/per_rank and
// OUTDIR/shared, and rank 0 writes the serial model's master weights to
// OUTDIR/reference.h5 with plain serial HDF5 (one dataset per FQN, raw bits for bf16).
//
//   mpiexec -n 2 write_reference_checkpoints OUTDIR

#include <hdf5.h>
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "ckpt_test_util.hpp"
#include "tessera/io/checkpoint.hpp"

using namespace tessera;
using namespace tessera::testing;


namespace {

constexpr std::uint64_t kSeed = 2024;

constexpr int kSteps = 2;

// AdamW runs on f32/f64 parameters: the bf16 layer ("3.*") stays out of the optimizer.
NamedParameters trainable(nn::Module& model) {
  auto params = model.named_parameters();
  return NamedParameters(params.begin(), params.begin() + 6);
}

void write_reference(const std::string& path) {
  // The serial model trained the same way: gradients depend only on (step, name,
  // global index), so its masters equal the parallel model's bit for bit.
  auto serial = make_serial_model(kSeed, /*with_bf16=*/true);
  AdamW adam(trainable(*serial), {});
  train(*serial, adam, kSteps);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw IoError("cannot create " + path);
  const hid_t group = H5Gcreate2(file, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (auto& [name, p] : serial->named_parameters()) {
    const Tensor& v = p->value;
    std::vector<hsize_t> dims(v.shape().begin(), v.shape().end());
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const bool bf16 = v.dtype() == DType::bf16;
    const hid_t dset = H5Dcreate2(group, name.c_str(), bf16 ? H5T_STD_U16LE : H5T_IEEE_F32LE, space, H5P_DEFAULT,
                                  H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(dset, bf16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(dset);
    H5Sclose(space);
  }
  H5Gclose(group);
  H5Fclose(file);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    if (argc != 2) throw InvalidArgument("usage: write_reference_checkpoints OUTDIR");
    const std::string out = argv[1];
    Mesh mesh(MPI_COMM_WORLD, config(DataParallelMode::none, world_size()));
    if (world_rank() == 0) {
      std::filesystem::remove_all(out);
      std::filesystem::create_directories(out);
      write_reference(out + "/reference.h5");
    }
    mesh.world().barrier();
    auto model = make_model(mesh.tp(), kSeed, /*with_bf16=*/true);
    AdamW adam(trainable(*model), {});
    train(*model, adam, kSteps);
    for (const auto layout : {io::CheckpointLayout::per_rank, io::CheckpointLayout::shared}) {
      io::SaveOptions o;
      o.layout = layout;
      o.step = 7;
      o.metadata = "model:\n  hidden: 16\n  layout: " + std::string(io::checkpoint_layout_name(layout)) + "\n";
      io::save_checkpoint(out + "/" + std::string(io::checkpoint_layout_name(layout)), mesh, *model, &adam, o);
    }
    if (world_rank() == 0) std::printf("wrote %s/{per_rank,shared,reference.h5}\n", out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_reference_checkpoints: error: %s\n", e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
