#pragma once
// Private: the pieces of the checkpoint format shared by the writers, the loader and
// the reader/tools: attribute names, header I/O, dataset paths, durable file steps.

#include <cstdint>
#include <string>

#include "io/hdf5_handles.hpp"
#include "tessera/io/checkpoint_reader.hpp"

namespace tessera::io::detail {

// "/model/fc.weight": the FQN is one link name inside the section group.
std::string dataset_path(const std::string& section, const std::string& name);

// Root attributes (every field of the header that applies to the file kind).
void write_header(hid_t file, const CheckpointHeader& header);
CheckpointHeader read_header(hid_t file, const std::string& file_name);

// Per-dataset attributes: placement, dtype, checksum.
void write_dataset_attributes(hid_t dataset, const std::string& placement, DType dtype, std::uint64_t checksum);

// A group that tracks link creation order, so tools list tensors in model order.
H5Group create_ordered_group(hid_t file, const std::string& name);

// Durability: flush a closed file's data, and a directory's entries, to stable storage.
void fsync_path(const std::string& path, bool directory);

}  // namespace tessera::io::detail

namespace tessera::io::detail {

// std::filesystem::rename with the failure as an IoError naming both paths.
void rename_path(const std::string& from, const std::string& to);

}  // namespace tessera::io::detail
