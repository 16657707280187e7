#pragma once
// Normalisation statistics of the field emulator's data: `tessera-run stats CONFIG`
// computes the mean and standard deviation of every selected channel over all times,
// latitudes and longitudes of data.path (plain, not area-weighted, population std, as
// numpy's mean/std) and writes them to data.stats, a small YAML file; a run with
// data.normalize reads them from there (for netCDF input, which carries no statistics,
// data.stats is how they are given).
//
// The sums are exact (domain::global_sum, one rounding): the file is the same to the
// last bit at every rank count and for every latitude order or longitude origin of the
// same data.

#include <string>
#include <vector>

#include "driver_common.hpp"
#include "run_config.hpp"

namespace tessera::run {

// Collective over MPI_COMM_WORLD; returns the exit status (errors are thrown).
int field_stats(const RunConfig& cfg, const Options& opts);

// The statistics of `channels` from the file `path` (data.stats): ConfigError / IoError
// naming the file and the channel it lacks, or a std that is not finite and > 0.
void read_field_stats(const std::string& path, const std::vector<std::string>& channels, std::vector<double>& mean,
                      std::vector<double>& std);

}  // namespace tessera::run
