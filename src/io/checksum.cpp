#include "tessera/io/checksum.hpp"

#include <bit>
#include <cstring>

#include "tessera/detail/checked_math.hpp"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little,
              "the checkpoint checksum hashes little-endian bit patterns");

namespace {

template <class Bits>
std::uint64_t row_sum(const unsigned char* p, std::int64_t n, std::uint64_t base) {
  std::uint64_t sum = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    Bits bits;
    std::memcpy(&bits, p + static_cast<std::size_t>(j) * sizeof(Bits), sizeof(Bits));
    sum += checksum_element(base + static_cast<std::uint64_t>(j), bits);
  }
  return sum;
}

}  // namespace

std::uint64_t block_checksum(const Tensor& block, const Shape& global_shape, const Shape& offset) {
  const int rank = block.dim();
  if (static_cast<int>(global_shape.size()) != rank || static_cast<int>(offset.size()) != rank) {
    throw ShapeError("block_checksum: block " + block.str() + ", offset " + shape_str(offset) +
                     " and global shape " + shape_str(global_shape) + " differ in rank");
  }
  // The global element count is the hash's index space: it must be countable (a C or
  // Fortran caller's global shape can be anything).
  (void)tessera::detail::checked_numel(global_shape, "block_checksum: global shape");
  for (int d = 0; d < rank; ++d) {
    // offset + extent compared without the sum, which could overflow for a huge offset.
    if (offset[d] < 0 || offset[d] > global_shape[d] || block.shape()[d] > global_shape[d] - offset[d]) {
      throw ShapeError("block_checksum: block " + block.str() + " at offset " + shape_str(offset) +
                       " lies outside global shape " + shape_str(global_shape));
    }
  }
  if (block.numel() == 0) return 0;
  const Tensor host = block.to(Device::host()).contiguous();  // no copy for a contiguous host tensor
  const auto* bytes = static_cast<const unsigned char*>(host.data());
  const std::size_t esize = host.element_size();
  const Shape global_strides = contiguous_strides(global_shape);
  const std::int64_t row = rank == 0 ? 1 : block.shape()[rank - 1];
  const std::int64_t rows = block.numel() / row;

  std::uint64_t sum = 0;
  Shape index(static_cast<std::size_t>(rank), 0);  // block index of the current row (last dim 0)
  for (std::int64_t r = 0; r < rows; ++r) {
    std::uint64_t base = 0;
    for (int d = 0; d < rank; ++d) base += static_cast<std::uint64_t>((offset[d] + index[d]) * global_strides[d]);
    const unsigned char* p = bytes + static_cast<std::size_t>(r * row) * esize;
    switch (esize) {  // fixed widths let the compiler unroll the hot loop
      case 2: sum += row_sum<std::uint16_t>(p, row, base); break;
      case 4: sum += row_sum<std::uint32_t>(p, row, base); break;
      case 8: sum += row_sum<std::uint64_t>(p, row, base); break;
      default: throw InternalError("block_checksum: element size " + std::to_string(esize));
    }
    for (int d = rank - 2; d >= 0; --d) {
      if (++index[d] < block.shape()[d]) break;
      index[d] = 0;
    }
  }
  return sum;
}

}  // namespace tessera::io
