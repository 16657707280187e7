// safetensors reading and writing (io/safetensors.hpp) and the PyTorch key mapping
// (io/weight_mapping.hpp): round trips of every dtype, conversions, every way a header
// can lie, and the mapping's plans, execution, reversibility and errors. The tool
// around them is checked end to end by tests/python/check_safetensors.py and
// check_pytorch.py.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tessera/error.hpp"
#include "tessera/io/safetensors.hpp"
#include "tessera/io/weight_mapping.hpp"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("tessera_safetensors_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  // A file with this header text and these data bytes, as any writer might make it.
  std::string forge(const std::string& name, const std::string& header, const std::string& data) {
    const std::string path = (dir / name).string();
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t n = header.size();
    char length[8];
    std::memcpy(length, &n, 8);
    out.write(length, 8);
    out << header << data;
    return path;
  }

  fs::path dir;
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(Safetensors, EveryDtypeRoundTripsBitForBit) {
  const Tensor f = Tensor::from_vector<float>({1.5f, -2.25f, 3e-30f, 7.f, 0.f, -0.f}, {2, 3});
  const Tensor d = Tensor::from_vector<double>({1e300, -1.0 / 3}, {2});
  const Tensor b = Tensor::from_vector<bfloat16>({bfloat16(1.f), bfloat16(-0.5f), bfloat16(3.f)}, {3, 1});
  const Tensor i = Tensor::from_vector<std::int64_t>({-(std::int64_t(1) << 62), 5}, {1, 2});
  const Tensor scalar = Tensor::from_vector<float>({42.f}, {});
  const std::string path = (dir / "all.safetensors").string();
  io::write_safetensors(path, {{"f", f}, {"d", d}, {"b", b}, {"i", i}, {"scalar", scalar}, {"empty", Tensor::zeros({0, 4}, DType::f32)}},
                        {{"format", "pt"}, {"note", "a \"quoted\"\\ value\n"}});

  const io::SafetensorsFile file(path);
  ASSERT_EQ(file.tensors().size(), 6u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "a \"quoted\"\\ value\n");
  const char* names[] = {"f", "d", "b", "i", "scalar", "empty"};
  const char* dtypes[] = {"F32", "F64", "BF16", "I64", "F32", "F32"};
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(file.tensors()[k].name, names[k]);  // the writer's order is the byte order
    EXPECT_EQ(file.tensors()[k].dtype, dtypes[k]);
  }
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
  };
  EXPECT_TRUE(same(file.read(*file.find("f")), f));
  EXPECT_TRUE(same(file.read(*file.find("d")), d));
  EXPECT_TRUE(same(file.read(*file.find("b")), b));
  EXPECT_TRUE(same(file.read(*file.find("i")), i));
  EXPECT_TRUE(same(file.read(*file.find("scalar")), scalar));
  EXPECT_EQ(file.read(*file.find("empty")).shape(), (Shape{0, 4}));
  // Every tensor starts 8-byte aligned: the header is padded to a multiple of 8.
  std::ifstream in(path, std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(Safetensors, ConvertsFloatsAndIntegersOnRequest) {
  // F16: 1, -2, 65504 (largest), 2^-24 (smallest subnormal); I32: -7, 9; BF16: 1.5.
  const unsigned char half[] = {0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x01, 0x00};
  const std::int32_t ints[] = {-7, 9};
  const unsigned char bf[] = {0xC0, 0x3F};
  std::string data(reinterpret_cast<const char*>(half), 8);
  data.append(reinterpret_cast<const char*>(ints), 8);
  data.append(reinterpret_cast<const char*>(bf), 2);
  const std::string path = forge("mixed.safetensors",
                                 R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},)"
                                 R"("i":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},)"
                                 R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[16,18]}})",
                                 data);
  const io::SafetensorsFile file(path);
  const auto h = file.read(*file.find("h"), DType::f32).to_vector<float>();
  EXPECT_EQ(h, (std::vector<float>{1.f, -2.f, 65504.f, std::ldexp(1.f, -24)}));
  EXPECT_EQ(file.read(*file.find("h"), DType::f64).to_vector<double>()[2], 65504.0);
  EXPECT_EQ(file.read(*file.find("i"), DType::f32).to_vector<std::int64_t>(), (std::vector<std::int64_t>{-7, 9}));
  EXPECT_EQ(file.read(*file.find("b"), DType::f32).to_vector<float>(), (std::vector<float>{1.5f}));
  // Without a conversion, a dtype tessera has no type for is an error naming it.
  const std::string e = error_of([&] { file.read(*file.find("h")); });
  EXPECT_NE(e.find("'h'"), std::string::npos) << e;
  EXPECT_NE(e.find("F16"), std::string::npos) << e;
  EXPECT_NE(e.find("mixed.safetensors"), std::string::npos) << e;
}

TEST_F(Safetensors, AHeaderThatLiesIsAnErrorNamingTheFileAndTensor) {
  const std::string data(24, '\0');  // room for a F32[2] and a F32[4]
  auto entry = [](const char* name, const char* dtype, const char* shape, const char* offsets) {
    return "\"" + std::string(name) + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offsets + "}";
  };
  const std::string a = entry("a", "F32", "[2]", "[0,8]");
  struct Case {
    const char* what;
    std::string header;
    std::vector<std::string> needles;
  } cases[] = {
      {"offsets past the end", "{" + a + "," + entry("b", "F32", "[4]", "[8,40]") + "}", {"'b'", "[8, 40)", "24"}},
      {"overlap", "{" + a + "," + entry("b", "F32", "[4]", "[4,20]") + "}", {"'b'", "overlap"}},
      {"gap", "{" + a + "," + entry("b", "F32", "[3]", "[12,24]") + "}", {"'b'", "gap"}},
      {"trailing bytes", "{" + a + "," + entry("b", "F32", "[3]", "[8,20]") + "}", {"trailing"}},
      {"bytes and shape disagree", "{" + a + "," + entry("b", "F32", "[5]", "[8,24]") + "}", {"'b'", "F32[5]", "20"}},
      {"unknown dtype", "{" + a + "," + entry("b", "Q7", "[4]", "[8,24]") + "}", {"'b'", "Q7"}},
      {"negative extent", "{" + a + "," + entry("b", "F32", "[-4]", "[8,24]") + "}", {"'b'", "shape"}},
      {"begin after end", "{" + a + "," + entry("b", "F32", "[4]", "[24,8]") + "}", {"'b'", "data_offsets"}},
      {"a missing field", R"({"a":{"dtype":"F32","shape":[2]}})", {"'a'", "data_offsets"}},
      {"an unknown field", R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24],"x":1}})", {"'a'", "'x'"}},
      {"a key twice", "{" + a + "," + a + "}", {"\"a\"", "twice"}},
      {"not JSON", "{\"a\": [1, 2,}", {"invalid JSON", "byte"}},
      {"not an object", "[1, 2]", {"an array"}},
      {"metadata not strings", R"({"__metadata__":{"k":3},"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})",
       {"__metadata__", "'k'"}},
      {"deep nesting", std::string(200, '[') + std::string(200, ']'), {"nested deeper"}},
  };
  int k = 0;
  for (const auto& c : cases) {
    const std::string name = "case" + std::to_string(k++) + ".safetensors";
    const std::string path = forge(name, c.header, data);
    const std::string e = error_of([&] { io::SafetensorsFile file(path); });
    EXPECT_NE(e.find(name), std::string::npos) << c.what << ": " << e;
    for (const auto& needle : c.needles) EXPECT_NE(e.find(needle), std::string::npos) << c.what << ": " << e;
  }
  // A header length beyond the file, and a file too short to hold one.
  const std::string path = forge("long.safetensors", "{}", "");
  fs::resize_file(path, 9);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const std::uint64_t huge = 1000;
  f.write(reinterpret_cast<const char*>(&huge), 8);
  f.close();
  EXPECT_NE(error_of([&] { io::SafetensorsFile x(path); }).find("header length is 1000"), std::string::npos);
  fs::resize_file(path, 3);
  EXPECT_NE(error_of([&] { io::SafetensorsFile x(path); }).find("too short"), std::string::npos);
}

TEST_F(Safetensors, NamesWithEscapesRoundTrip) {
  // A name needing JSON escapes, and a \u escape with a surrogate pair from another writer.
  const std::string odd = "a\"b\\c\td";
  const std::string path = (dir / "names.safetensors").string();
  io::write_safetensors(path, {{odd, Tensor::from_vector<float>({1.f}, {1})}});
  EXPECT_NE(io::SafetensorsFile(path).find(odd), nullptr);
  const std::string forged = forge("unicode.safetensors",
                                   R"({"caf\u00e9.\ud83d\ude00":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                                   std::string(4, '\0'));
  EXPECT_NE(io::SafetensorsFile(forged).find("caf\xC3\xA9.\xF0\x9F\x98\x80"), nullptr);
  const io::NamedTensors twice = {{"x", Tensor::zeros({1}, DType::f32)}, {"x", Tensor::zeros({1}, DType::f32)}};
  EXPECT_THROW(io::write_safetensors(path, twice), InvalidArgument);
}

// Issue 46: a name with an embedded NUL (HDF5 would cut it to "w" and meet the real
// "w"), non-finite weights, and paths that are not regular files are refused by name.
TEST_F(Safetensors, NulNamesNonFiniteValuesAndNonRegularFilesAreRefused) {
  const std::string nul = forge("nul.safetensors", R"({"w\u0000x":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                                std::string(4, '\0'));
  const std::string e = error_of([&] { io::SafetensorsFile x(nul); });
  EXPECT_NE(e.find("'w\\u0000x'"), std::string::npos) << e;
  EXPECT_NE(e.find("NUL"), std::string::npos) << e;
  EXPECT_THROW(io::write_safetensors((dir / "w.safetensors").string(),
                                     {{std::string("w\0x", 3), Tensor::zeros({1}, DType::f32)}}),
               InvalidArgument);

  const std::string path = (dir / "nan.safetensors").string();
  io::write_safetensors(path, {{"ok", Tensor::from_vector<float>({1.f, 2.f}, {2})},
                               {"bad", Tensor::from_vector<float>({1.f, NAN}, {2})},
                               {"inf", Tensor::from_vector<double>({INFINITY}, {1})}});
  const io::SafetensorsFile file(path);
  EXPECT_NO_THROW(file.read(*file.find("ok")));
  const std::string bad = error_of([&] { file.read(*file.find("bad")); });
  EXPECT_NE(bad.find("tensor 'bad': element 1 is NaN"), std::string::npos) << bad;
  const std::string inf = error_of([&] { file.read(*file.find("inf"), DType::f32); });
  EXPECT_NE(inf.find("tensor 'inf': element 0 is an infinite value"), std::string::npos) << inf;

  const std::string fifo = (dir / "fifo.safetensors").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& path_kind : std::vector<std::pair<std::string, std::string>>{
           {"/dev/zero", "a character device"}, {dir.string(), "a directory"}, {fifo, "a FIFO"}}) {
    const std::string& where = path_kind.first;  // not a structured binding: clang 14 cannot capture one
    const std::string& kind = path_kind.second;
    const std::string refused = error_of([&] { io::SafetensorsFile x(where); });
    EXPECT_NE(refused.find("'" + where + "' is " + kind + ", not a regular file"), std::string::npos) << refused;
    const std::string mapping = error_of([&] { io::WeightMapping::from_file(where); });
    EXPECT_NE(mapping.find("mapping file '" + where + "' is " + kind), std::string::npos) << mapping;
  }
}

// ---- The mapping.

const char* kMapping = R"(tensors:
  embed.weight: tok.weight
  layers.*.q.weight: {from: blocks.*.qkv.weight, split: {dim: 0, parts: 3, index: 0}}
  layers.*.k.weight: {from: blocks.*.qkv.weight, split: {dim: 0, parts: 3, index: 1}}
  layers.*.v.weight: {from: blocks.*.qkv.weight, split: {dim: 0, parts: 3, index: 2}}
  layers.*.gate.weight: {from: blocks.*.w13, split: {dim: 1, sizes: [2, 1], index: 0}, transpose: true}
  layers.*.up.weight: {from: blocks.*.w13, split: {dim: 1, sizes: [2, 1], index: 1}, transpose: true}
  head.weight: {from: lm_head, transpose: true}
ignore: [blocks.*.mask]
)";

Tensor iota(const Shape& shape, float start) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from_vector<float>(v, shape);
}

TEST(WeightMapping, SplitsTransposesRenamesAndGoesBack) {
  const auto mapping = io::WeightMapping::from_yaml(kMapping, "map.yaml");
  EXPECT_EQ(mapping.rules().size(), 7u);
  // PyTorch side: d_model 2, two layers, a fused [3*2, 2] qkv, a [4, 3] gate|up stored
  // [in, out] (so tessera's [2, 4] and [1, 4] come from columns and a transpose).
  std::vector<std::pair<std::string, Tensor>> torch_side = {
      {"tok.weight", iota({5, 2}, 0)},      {"blocks.0.qkv.weight", iota({6, 2}, 100)},
      {"blocks.0.w13", iota({4, 3}, 200)},  {"blocks.0.mask", iota({2, 2}, 0)},
      {"blocks.1.qkv.weight", iota({6, 2}, 300)}, {"blocks.1.w13", iota({4, 3}, 400)},
      {"lm_head", iota({2, 5}, 500)}};
  io::NamedShapes keys;
  for (const auto& [k, t] : torch_side) keys.emplace_back(k, t.shape());
  const auto steps = mapping.plan_import(keys, "model.safetensors");
  std::vector<std::string> names;
  for (const auto& s : steps) names.push_back(s.tessera_name);
  EXPECT_EQ(names, (std::vector<std::string>{"embed.weight", "layers.0.q.weight", "layers.0.k.weight",
                                             "layers.0.v.weight", "layers.0.gate.weight", "layers.0.up.weight",
                                             "layers.1.q.weight", "layers.1.k.weight", "layers.1.v.weight",
                                             "layers.1.gate.weight", "layers.1.up.weight", "head.weight"}));
  std::map<std::string, Tensor> tessera_side;
  for (const auto& s : steps) {
    const auto it = std::find_if(torch_side.begin(), torch_side.end(), [&](auto& p) { return p.first == s.source_name; });
    tessera_side[s.tessera_name] = io::WeightMapping::apply(s, it->second);
    EXPECT_EQ(tessera_side[s.tessera_name].shape(), s.shape);
  }
  // k of layer 0: rows 2..3 of qkv; gate: columns 0..1 of w13, transposed; head transposed.
  EXPECT_EQ(tessera_side["layers.0.k.weight"].to_vector<float>(), (std::vector<float>{104, 105, 106, 107}));
  EXPECT_EQ(tessera_side["layers.0.gate.weight"].shape(), (Shape{2, 4}));
  EXPECT_EQ(tessera_side["layers.0.gate.weight"].to_vector<float>(),
            (std::vector<float>{200, 203, 206, 209, 201, 204, 207, 210}));
  EXPECT_EQ(tessera_side["layers.1.up.weight"].to_vector<float>(), (std::vector<float>{402, 405, 408, 411}));
  EXPECT_EQ(tessera_side["head.weight"].shape(), (Shape{5, 2}));
  EXPECT_EQ(tessera_side["head.weight"].to_vector<float>()[1], 505.f);

  // And back: the same keys, shapes and values (the ignored mask aside).
  io::NamedShapes names_shapes;
  for (const auto& s : steps) names_shapes.emplace_back(s.tessera_name, s.shape);
  const auto out = mapping.plan_export(names_shapes, "ckpt");
  ASSERT_EQ(out.size(), 6u);
  for (const auto& step : out) {
    std::vector<Tensor> parts;
    for (const auto& p : step.parts) parts.push_back(tessera_side[p.tessera_name]);
    const Tensor back = io::WeightMapping::assemble(step, parts);
    const auto it = std::find_if(torch_side.begin(), torch_side.end(), [&](auto& p) { return p.first == step.source_name; });
    ASSERT_NE(it, torch_side.end()) << step.source_name;
    EXPECT_EQ(back.shape(), it->second.shape()) << step.source_name;
    EXPECT_EQ(back.to_vector<float>(), it->second.to_vector<float>()) << step.source_name;
  }
}

TEST(WeightMapping, ErrorsNameTheKeyShapeRuleAndFile) {
  const auto mapping = io::WeightMapping::from_yaml(kMapping, "map.yaml");
  auto plan = [&](io::NamedShapes keys) { return error_of([&] { mapping.plan_import(keys, "m.safetensors"); }); };
  const io::NamedShapes base = {{"tok.weight", {5, 2}}, {"blocks.0.qkv.weight", {6, 2}}, {"blocks.0.w13", {4, 3}},
                                {"lm_head", {2, 5}}};
  auto with = [&](std::pair<std::string, Shape> extra) {
    auto k = base;
    k.push_back(std::move(extra));
    return k;
  };
  std::string e = plan(with({"blocks.0.bias", {3}}));
  for (const char* n : {"map.yaml", "'blocks.0.bias'", "m.safetensors", "[3]", "ignore"}) {
    EXPECT_NE(e.find(n), std::string::npos) << e;
  }
  auto k = base;
  k[1].second = {7, 2};  // 7 rows do not split in 3
  e = plan(k);
  for (const char* n : {"map.yaml:3", "'blocks.0.qkv.weight'", "[7, 2]", "3 equal parts"}) {
    EXPECT_NE(e.find(n), std::string::npos) << e;
  }
  k = base;
  k[3].second = {2, 5, 1};  // a transpose of a 3-D tensor
  e = plan(k);
  EXPECT_NE(e.find("not 2-D"), std::string::npos) << e;
  EXPECT_NE(e.find("'lm_head'"), std::string::npos) << e;
  k = base;
  k.erase(k.begin());  // the embed rule then matches nothing
  e = plan(k);
  EXPECT_NE(e.find("map.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("matches no key"), std::string::npos) << e;

  // Export: a part of a split missing, a tensor no rule names.
  auto exported = [&](io::NamedShapes names) { return error_of([&] { mapping.plan_export(names, "ck.h5"); }); };
  e = exported({{"embed.weight", {5, 2}}, {"layers.0.q.weight", {2, 2}}, {"layers.0.k.weight", {2, 2}},
                {"layers.0.gate.weight", {2, 4}}, {"layers.0.up.weight", {1, 4}}, {"head.weight", {5, 2}}});
  for (const char* n : {"'blocks.0.qkv.weight'", "3 parts", "ck.h5"}) EXPECT_NE(e.find(n), std::string::npos) << e;
  e = exported({{"embed.weight", {5, 2}}, {"extra.bias", {4}}});
  EXPECT_NE(e.find("'extra.bias'"), std::string::npos) << e;

  // The file itself: unequal '*' counts, unknown keys, a key twice, a bad split.
  const std::pair<const char*, const char*> bad[] = {
      {"tensors:\n  a.*.w: b.w\n", "different numbers of '*'"},
      {"tensors:\n  a: b\nextra: 1\n", "unknown key 'extra'"},
      {"tensors:\n  a: b\n  a: c\n", "twice"},
      {"tensors:\n  a: {from: b, split: {dim: 0, parts: 2, index: 2}}\n", "index 2"},
      {"tensors:\n  a: {from: b, split: {dim: 0, index: 0}}\n", "one of parts or sizes"},
      {"tensors:\n  a: {from: b, rotate: true}\n", "unknown key 'rotate'"},
      {"ignore: [x]\n", "no `tensors:`"},
  };
  for (const auto& entry : bad) {
    const char* text = entry.first;  // not a structured binding: clang 14 cannot capture one
    const char* needle = entry.second;
    e = error_of([&] { io::WeightMapping::from_yaml(text, "bad.yaml"); });
    EXPECT_NE(e.find("bad.yaml"), std::string::npos) << text << ": " << e;
    EXPECT_NE(e.find(needle), std::string::npos) << text << ": " << e;
  }
}

// rope_permute (issue 43): Hugging Face's half-split rotary pairing (i, i + head_dim/2)
// to tessera's interleaved (2i, 2i+1), per head, after a split, and back on export.
TEST(WeightMapping, RopePermuteReordersRowsPerHeadAndExportUndoesIt) {
  const auto mapping = io::WeightMapping::from_yaml(R"(tensors:
  q.weight: {from: q_proj.weight, rope_permute: half_to_interleaved, heads: 2}
  k.weight: {from: qk.weight, split: {dim: 0, sizes: [8, 4], index: 1}, rope_permute: half_to_interleaved, heads: 1}
  qq.weight: {from: qk.weight, split: {dim: 0, sizes: [8, 4], index: 0}}
  b: {from: bias, rope_permute: interleaved_to_half, heads: 1}
)", "rope.yaml");
  // q_proj: 2 heads of head_dim 4, rows r hold r*10, r*10+1 (2 input features).
  std::vector<float> q(16);
  for (int r = 0; r < 8; ++r) q[2 * r] = static_cast<float>(10 * r), q[2 * r + 1] = static_cast<float>(10 * r + 1);
  const std::map<std::string, Tensor> torch_side = {{"q_proj.weight", Tensor::from_vector<float>(q, {8, 2})},
                                                    {"qk.weight", iota({12, 1}, 0)},
                                                    {"bias", iota({4}, 0)}};
  io::NamedShapes keys;
  for (const auto& [k, t] : torch_side) keys.emplace_back(k, t.shape());
  const auto steps = mapping.plan_import(keys, "hf.safetensors");
  std::map<std::string, Tensor> tessera_side;
  for (const auto& s : steps) tessera_side[s.tessera_name] = io::WeightMapping::apply(s, torch_side.at(s.source_name));
  // Head 0: rows 0, 2, 1, 3 (pairs (0, 2), (1, 3)); head 1: rows 4, 6, 5, 7.
  EXPECT_EQ(tessera_side["q.weight"].to_vector<float>(),
            (std::vector<float>{0, 1, 20, 21, 10, 11, 30, 31, 40, 41, 60, 61, 50, 51, 70, 71}));
  // The split's part (rows 8..11) permuted on its own; the other part untouched.
  EXPECT_EQ(tessera_side["k.weight"].to_vector<float>(), (std::vector<float>{8, 10, 9, 11}));
  EXPECT_EQ(tessera_side["qq.weight"].to_vector<float>(), iota({8, 1}, 0).to_vector<float>());
  // interleaved_to_half: the inverse (rows 0, 2 first, then 1, 3).
  EXPECT_EQ(tessera_side["b"].to_vector<float>(), (std::vector<float>{0, 2, 1, 3}));

  io::NamedShapes names;
  for (const auto& s : steps) names.emplace_back(s.tessera_name, s.shape);
  for (const auto& step : mapping.plan_export(names, "ckpt")) {
    std::vector<Tensor> parts;
    for (const auto& p : step.parts) parts.push_back(tessera_side[p.tessera_name]);
    EXPECT_EQ(io::WeightMapping::assemble(step, parts).to_vector<float>(),
              torch_side.at(step.source_name).to_vector<float>())
        << step.source_name;
  }

  // Errors: heads that do not divide dim 0 into even head dims (naming the rule, key and
  // shape), a bad name, heads without rope_permute and the reverse.
  std::string e = error_of([&] { mapping.plan_import({{"q_proj.weight", {6, 2}}, {"qk.weight", {12, 1}},
                                                      {"bias", {4}}}, "hf.safetensors"); });
  for (const char* n : {"rope.yaml:2", "'q_proj.weight'", "[6, 2]", "hf.safetensors", "2 heads", "even head_dim"}) {
    EXPECT_NE(e.find(n), std::string::npos) << e;
  }
  const std::pair<const char*, const char*> bad[] = {
      {"tensors:\n  a: {from: b, rope_permute: sideways, heads: 2}\n", "rope_permute is 'sideways'"},
      {"tensors:\n  a: {from: b, heads: 2}\n", "heads needs rope_permute"},
      {"tensors:\n  a: {from: b, rope_permute: half_to_interleaved}\n", "needs heads"},
      {"tensors:\n  a: {from: b, rope_permute: half_to_interleaved, heads: 0}\n", "heads must be >= 1"},
  };
  for (const auto& entry : bad) {
    const char* text = entry.first;
    const char* needle = entry.second;
    e = error_of([&] { io::WeightMapping::from_yaml(text, "bad.yaml"); });
    EXPECT_NE(e.find("bad.yaml"), std::string::npos) << text << ": " << e;
    EXPECT_NE(e.find(needle), std::string::npos) << text << ": " << e;
  }
}

TEST(WeightMapping, IdentityAndPassthroughKeepNames) {
  const io::WeightMapping identity;
  const auto steps = identity.plan_import({{"x.weight", {2, 3}}, {"y", {}}}, "f");
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].tessera_name, "x.weight");
  EXPECT_EQ(steps[1].shape, Shape{});
  const auto partial = io::WeightMapping::from_yaml("tensors:\n  a.w: b.w\npassthrough: true\n", "p.yaml");
  const auto s = partial.plan_import({{"b.w", {1}}, {"c", {2}}}, "f");
  EXPECT_EQ(s[0].tessera_name, "a.w");
  EXPECT_EQ(s[1].tessera_name, "c");
  // A PyTorch key made twice over (a passthrough name colliding with a rule's) is refused.
  EXPECT_NE(error_of([&] { partial.plan_import({{"b.w", {1}}, {"a.w", {1}}}, "f"); }).find("'a.w'"), std::string::npos);
}

}  // namespace
