// The shared layout: one file, parallel HDF5, collective metadata and hyperslab writes.
#include <algorithm>
#include <filesystem>

#include "io/checkpoint_collectives.hpp"
#include "io/checkpoint_save.hpp"
#include "tessera/agree.hpp"

namespace fs = std::filesystem;

namespace tessera::io::detail {

namespace {

// An upper estimate of the file's size: the data at its global shapes, plus HDF5's
// metadata (superblock, groups, object headers and attributes).
std::uint64_t estimated_file_bytes(const std::vector<Entry>& entries) {
  std::uint64_t bytes = std::uint64_t{64} << 10;
  for (const Entry& e : entries) {
    bytes += static_cast<std::uint64_t>(shape_numel(e.global_shape)) * dtype_size(e.host.dtype()) + 4096;
  }
  return bytes;
}

}  // namespace

void save_shared(SaveContext& c) {
  std::vector<std::uint64_t> totals(c.entries.size());
  for (std::size_t i = 0; i < c.entries.size(); ++i) totals[i] = c.entries[i].checksum;
  all_reduce_checksums(c.world, totals);
  for (std::size_t i = 0; i < c.entries.size(); ++i) c.entries[i].checksum = totals[i];

  const std::string path = (fs::path(c.temp_dir) / checkpoint_file_name).string();
  const MPI_Comm comm = c.world.mpi_comm();
  const int rank = c.world.rank();
  // Room for the whole file first, in one agreed step. Once the collective file exists,
  // a write that fails on one rank only (a full disk, a file-size limit) leaves the
  // others inside an MPI-IO collective, and closing the file flushes metadata that may
  // fail the same way: the ranks would wait for each other for ever. Checking the space
  // up front turns the common cases into a clean, agreed error before H5Fcreate.
  agree_on_success(comm, [&] {
    if (rank == 0) check_free_space(c.temp_dir, estimated_file_bytes(c.entries));
  });
  {
    H5File file;
    H5Group model, optimizer;
    std::vector<H5Dataset> datasets;
    // Every call below is collective: each rank makes it in the same order with the
    // same arguments, and the ranks agree after each phase, so a failure on one rank
    // reaches every rank at the next agreement instead of leaving the others waiting.
    agree_on_success(comm, [&] {
      H5Plist fapl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS)));
      TESSERA_CHECK_HDF5(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
      TESSERA_CHECK_HDF5(H5Pset_all_coll_metadata_ops(fapl.get(), true));
      TESSERA_CHECK_HDF5(H5Pset_coll_metadata_write(fapl.get(), true));
      file = H5File(TESSERA_CHECK_HDF5(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get())));
    });
    agree_on_success(comm, [&] {
      write_header(file.get(), c.header);
      model = create_ordered_group(file.get(), "model");
      if (!c.header.optimizer_type.empty()) {
        optimizer = create_ordered_group(file.get(), "optimizer");
        write_optimizer_group_attributes(optimizer.get(), c.header);
      }
      H5Plist dcpl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE)));
      // Every element is written, so filling first would only double the I/O.
      TESSERA_CHECK_HDF5(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
      for (const Entry& e : c.entries) {
        const H5Space space = make_space(e.global_shape);
        const hid_t group = e.section == "model" ? model.get() : optimizer.get();
        datasets.emplace_back(TESSERA_CHECK_HDF5(H5Dcreate2(group, e.name.c_str(), file_type_of(e.host.dtype()),
                                                            space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)));
        write_dataset_attributes(datasets.back().get(), e.placement.str(), e.host.dtype(), e.checksum);
      }
    });
    H5Plist dxpl(TESSERA_CHECK_HDF5(H5Pcreate(H5P_DATASET_XFER)));
    TESSERA_CHECK_HDF5(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
    for (std::size_t i = 0; i < c.entries.size(); ++i) {
      const Entry& e = c.entries[i];
      agree_on_success(comm, [&] {
        H5Space file_space(TESSERA_CHECK_HDF5(H5Dget_space(datasets[i].get())));
        const bool writes = e.writer && e.host.numel() > 0;
        const H5Space memory_space = make_space(writes ? e.host.shape() : Shape{1});
        if (writes) {
          select_block(file_space, e.offset, e.host.shape());
        } else {
          // Replicas take part in the collective call with an empty selection.
          TESSERA_CHECK_HDF5(H5Sselect_none(file_space.get()));
          TESSERA_CHECK_HDF5(H5Sselect_none(memory_space.get()));
        }
        static const std::int64_t dummy = 0;  // a valid buffer for an empty selection
        TESSERA_CHECK_HDF5(H5Dwrite(datasets[i].get(), memory_type_of(e.host.dtype()), memory_space.get(),
                                    file_space.get(), dxpl.get(), writes ? e.host.data() : &dummy));
        if (i == 0) c.hook.maybe_fail(rank, "write", "writing " + e.path() + " to " + path);
      });
    }
    agree_on_success(comm, [&] {
      for (H5Dataset& d : datasets) d.close();
      optimizer.close();
      model.close();
      file.close();
    });
  }
  // Each rank flushes what its node wrote (on a parallel file system, every node's).
  agree_on_success(comm, [&] {
    fsync_path(path, false);
    c.hook.maybe_fail(rank, "index", "finishing " + path);
    // Read back once, from the page cache: the MANIFEST's CRC covers what MPI-IO wrote.
    if (rank == 0) c.files.push_back(digest_file(c.temp_dir, checkpoint_file_name));
  });
}

}  // namespace tessera::io::detail
