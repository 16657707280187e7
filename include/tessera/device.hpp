#pragma once
// Where a tensor's memory lives.

#include <string>

namespace tessera {

enum class DeviceType { host, cuda };

struct Device {
  DeviceType type = DeviceType::host;
  // CUDA device ordinal; ignored for the host. A Mesh built for `Device::cuda()`
  // replaces kAutoIndex with the device chosen from the node-local rank.
  int index = 0;

  static constexpr int kAutoIndex = -1;

  static Device host() { return {DeviceType::host, 0}; }
  static Device cuda(int index = kAutoIndex) { return {DeviceType::cuda, index}; }

  bool is_host() const { return type == DeviceType::host; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device& other) const {
    return type == other.type && (is_host() || index == other.index);
  }
  std::string str() const;  // "host", "cuda:1", "cuda:auto"
};

}  // namespace tessera
