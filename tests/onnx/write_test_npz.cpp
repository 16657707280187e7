// Writes a known .npz with tessera-onnx's writer (tools/tessera-onnx/npz.cpp), for
// check_tessera_onnx.py to read with numpy and zipfile (which checks every CRC):
//
//   write_test_npz OUT.npz
//
// Also checks the CRC-32 against its published check value (exit 1 if it differs).
#include <iostream>
#include <map>
#include <vector>

#include "npz.hpp"

int main(int argc, char** argv) {
  using namespace tessera;
  if (argc != 2) {
    std::cerr << "usage: write_test_npz OUT.npz\n";
    return 2;
  }
  if (onnx_tool::crc32("123456789") != 0xCBF43926u) {
    std::cerr << "crc32(\"123456789\") is not 0xCBF43926\n";
    return 1;
  }
  std::vector<float> weight(6);
  for (int k = 0; k < 6; ++k) weight[k] = 0.5f * static_cast<float>(k) - 1.0f;
  std::map<std::string, Tensor> arrays;
  arrays["/block.0/conv.weight"] = Tensor::from_vector(weight, {2, 3});
  arrays["bias"] = Tensor::from_vector(std::vector<double>{1.25, -2.5, 3.75, 1e-300}, {4});
  arrays["scale"] = Tensor::from_vector(std::vector<double>{0.125}, {});
  onnx_tool::write_npz(argv[1], arrays);
  return 0;
}
