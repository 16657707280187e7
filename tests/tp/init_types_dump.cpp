// The tessera half of check_init_types_torch.py: writes, for each case, the master that
// initialize() builds and (orthogonal) the Gaussian matrix InitSpec::normal(0, 1) draws
// for the same name, as raw little-endian f64, plus a manifest of the cases. The script
// feeds that Gaussian matrix to torch.nn.init.orthogonal_ and compares.
//
//     init_types_dump OUTDIR

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tessera/error.hpp"
#include "tessera/init.hpp"

using namespace tessera;

namespace {

void write(const std::string& path, const std::vector<double>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
  if (!out) throw IoError("init_types_dump: cannot write " + path);
}

std::vector<double> master(const Shape& shape, const InitSpec& spec, const std::string& name) {
  Tensor t = Tensor::empty(shape, DType::f64);
  initialize(t, shape, Shape(shape.size(), 0), spec, 7, name);
  return t.to_vector<double>();
}

std::string dims(const Shape& shape) {
  std::string s;
  for (std::int64_t d : shape) s += (s.empty() ? "" : ",") + std::to_string(d);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: init_types_dump OUTDIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  std::ofstream manifest(dir + "/manifest.txt");
  int id = 0;
  for (const auto& [shape, gain] : std::vector<std::pair<Shape, double>>{
           {{64, 256}, 1.0}, {{300, 40}, 0.5}, {{48, 48}, 2.0}, {{16, 8, 3, 3}, 1.3}, {{7, 1}, 1.0}}) {
    const std::string name = "layers." + std::to_string(id) + ".weight";
    write(dir + "/" + std::to_string(id) + ".gauss", master(shape, InitSpec::normal(0.0, 1.0), name));
    write(dir + "/" + std::to_string(id) + ".w", master(shape, InitSpec::orthogonal(gain), name));
    manifest << id++ << " orthogonal " << dims(shape) << " " << gain << "\n";
  }
  for (const auto& [shape, groups] : std::vector<std::pair<Shape, std::int64_t>>{
           {{6, 4, 3, 3}, 1}, {{8, 3, 5}, 2}, {{4, 6, 3, 3, 3}, 1}, {{6, 2, 2, 4}, 3}, {{5, 7}, 1}, {{7, 5}, 1}}) {
    write(dir + "/" + std::to_string(id) + ".w", master(shape, InitSpec::dirac(groups), "conv.weight"));
    manifest << id++ << " dirac " << dims(shape) << " " << groups << "\n";
  }
  return manifest ? 0 : 1;
}
