#pragma once
// A CF-1.8 netCDF-4 file written in parallel: tessera-run predict's rollouts.
//
// Rank 0 lays the file out with HDF5 in netCDF-4's conventions: every dimension (time,
// optional level, latitude, longitude) a coordinate variable that is an HDF5 dimension
// scale with its _Netcdf4Dimid, written as the layout's axes say (the input's names,
// order, element types and attributes: cf_axes.hpp), every data variable f32 (time,
// [level,] lat, lon) with its scales attached and its CF attributes, and the global
// attributes, each data variable contiguous and allocated at creation. Then it closes
// the file and every writing rank writes the rows of its latitude band, as they are
// computed, straight to the offsets HDF5 chose (pwrite: no rank waits in a collective
// I/O call, and memory holds one time step), each row and column at the place the
// layout's orientation gives it in the file (the inverse of the reader's mapping). finish() syncs and agrees, and
// rank 0 renames the file into place, so a rollout that fails leaves no partial file
// under the output name. ncdump, netCDF4-python and xarray read the result (tested).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "field_data.hpp"
#include "tessera/comm.hpp"

namespace tessera::run {

// What the file holds. Channel c of the data is (variable, level) in `variables` order,
// a level variable taking axes.level.values.size() consecutive channels (as FieldDataInfo).
struct CfOutputLayout {
  std::string path;
  FileAxes axes;                        // as written, in the file's order; time: the output times
  GridOrientation orientation;          // where the bands' internal rows and columns go in the file
  std::vector<FieldVariable> variables;
  std::vector<std::pair<std::string, std::string>> global_attributes;  // Conventions, history, ...
};

class CfWriter {
 public:
  // Collective over `comm`: rank 0 creates and lays out the file (errors agreed) and
  // broadcasts the variables' offsets.
  CfWriter(const CfOutputLayout& layout, Communicator& comm);
  // A writer destroyed before finish() renamed the file (an error on the way: a full
  // disk, a refused forecast) removes the unfinished PATH.tmp, on rank 0.
  ~CfWriter();
  CfWriter(const CfWriter&) = delete;
  CfWriter& operator=(const CfWriter&) = delete;

  // Local: writes internal rows [lat_start, lat_start + lat_count) of every channel at
  // output time `time_index` from `band` f32 [channels, lat_count, nlon] (tessera's
  // orientation) to the file rows and columns they come from. A failure is kept, not
  // thrown (the other ranks are computing the next step), and reported by finish.
  void write(std::int64_t time_index, std::int64_t lat_start, std::int64_t lat_count, const float* band);
  // Collective: fsync, agree that every rank wrote, rename into place. IoError naming
  // the file on every rank when any rank failed.
  void finish();

 private:
  Communicator& comm_;
  std::string path_, tmp_;
  std::int64_t nlat_ = 0, nlon_ = 0, nlev_ = 0, channels_ = 0;
  GridOrientation orientation_;
  std::vector<float> file_order_;               // one channel's band in the file's order
  std::vector<std::uint64_t> channel_offset_;   // byte offset of channel c at time 0, row 0
  std::vector<std::uint64_t> channel_stride_;   // bytes from one time to the next
  int fd_ = -1;
  std::string error_;
  bool renamed_ = false;

  void remove_unfinished() const;
};

}  // namespace tessera::run
