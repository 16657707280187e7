// netCDF input and output in a tessera-run built without them (TESSERA_ENABLE_NETCDF=OFF,
// or AUTO where HDF5's high-level library, hdf5_hl, was not found): every entry point
// fails with an error naming the file and the missing feature.

#include "netcdf_input.hpp"
#include "netcdf_output.hpp"
#include "tessera/error.hpp"

namespace tessera::run {
namespace {

[[noreturn]] void unavailable(const std::string& what) {
  throw UnsupportedError(what + ": this tessera-run was built without netCDF support (configure with "
                                "-DTESSERA_ENABLE_NETCDF=ON; it needs HDF5's high-level library, hdf5_hl)");
}

}  // namespace

FieldDataInfo read_netcdf_info(const DataConfig&, const std::vector<std::string>& files) {
  unavailable("reading netCDF data file '" + files.front() + "' (data.path)");
}

void read_netcdf_band(const FieldDataInfo& info, std::int64_t, std::int64_t, std::int64_t, std::int64_t, float*) {
  unavailable("reading netCDF data file '" + info.files.front() + "'");
}

CfWriter::CfWriter(const CfOutputLayout& layout, Communicator& comm) : comm_(comm) {
  unavailable("writing netCDF file '" + layout.path + "' (predict.output)");
}
CfWriter::~CfWriter() = default;
void CfWriter::write(std::int64_t, std::int64_t, std::int64_t, const float*) {}
void CfWriter::finish() {}

}  // namespace tessera::run
