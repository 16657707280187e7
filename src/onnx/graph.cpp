// The graph's wiring checks and its topological order, shared by every way a Graph is
// made (a file, or code in the tests).
#include "onnx/graph.hpp"

#include <cstddef>
#include <deque>

#include "tessera/error.hpp"

namespace tessera::onnx {

std::string Graph::where() const {
  return source.empty() ? std::string("the graph") : "model '" + source + "'";
}

namespace {

constexpr std::size_t kNotANode = static_cast<std::size_t>(-1);

// value name -> the node that produces it (kNotANode for a graph input or initializer).
std::map<std::string, std::size_t> find_producers(const Graph& graph) {
  std::map<std::string, std::size_t> producer;
  auto claim = [&](const std::string& value, std::size_t by, const std::string& who) {
    auto [it, fresh] = producer.emplace(value, by);
    if (fresh) return;
    const std::string first = it->second == kNotANode ? std::string("a graph input or initializer")
                                                      : graph.nodes[it->second].where();
    throw InvalidArgument(graph.where() + ": the value '" + value + "' is produced twice, by " + first +
                          " and by " + who);
  };
  for (const GraphValue& input : graph.inputs) claim(input.name, kNotANode, "a graph input");
  for (const auto& entry : graph.initializers) {
    // An initializer may also be listed as a graph input (older exporters): one value.
    if (producer.count(entry.first) == 0) claim(entry.first, kNotANode, "an initializer");
  }
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    for (const std::string& out : graph.nodes[n].outputs) {
      if (!out.empty()) claim(out, n, graph.nodes[n].where());
    }
  }
  return producer;
}

// A node on a cycle, given the nodes Kahn's algorithm could not order: walking from one
// of them to an unordered producer of its inputs must come back to a node already seen.
std::size_t node_on_cycle(const Graph& graph, const std::map<std::string, std::size_t>& producer,
                          const std::vector<bool>& done) {
  std::size_t n = 0;
  while (done[n]) ++n;
  std::vector<bool> seen(graph.nodes.size(), false);
  while (!seen[n]) {
    seen[n] = true;
    for (const std::string& in : graph.nodes[n].inputs) {
      auto it = in.empty() ? producer.end() : producer.find(in);
      if (it != producer.end() && it->second != kNotANode && !done[it->second]) {
        n = it->second;
        break;
      }
    }
  }
  return n;
}

}  // namespace

void sort_and_check_graph(Graph& graph) {
  const std::map<std::string, std::size_t> producer = find_producers(graph);
  const std::size_t count = graph.nodes.size();
  std::vector<std::size_t> waiting_on(count, 0);       // inputs not yet produced
  std::vector<std::vector<std::size_t>> readers(count);  // node -> nodes reading its outputs
  for (std::size_t n = 0; n < count; ++n) {
    for (const std::string& in : graph.nodes[n].inputs) {
      if (in.empty()) continue;  // an omitted optional input
      auto it = producer.find(in);
      if (it == producer.end()) {
        throw InvalidArgument(graph.where() + ": " + graph.nodes[n].where() + " reads the value '" + in +
                              "', which no node, initializer or graph input produces");
      }
      if (it->second != kNotANode) {
        ++waiting_on[n];
        readers[it->second].push_back(n);
      }
    }
  }
  for (const GraphValue& output : graph.outputs) {
    if (producer.count(output.name) == 0) {
      throw InvalidArgument(graph.where() + ": the graph output '" + output.name + "' is produced by no node");
    }
  }
  // Kahn's algorithm, taking ready nodes in file order so a sorted file keeps its order.
  std::deque<std::size_t> ready;
  for (std::size_t n = 0; n < count; ++n) {
    if (waiting_on[n] == 0) ready.push_back(n);
  }
  std::vector<NodeSpec> sorted;
  sorted.reserve(count);
  std::vector<bool> done(count, false);
  while (!ready.empty()) {
    const std::size_t n = ready.front();
    ready.pop_front();
    done[n] = true;
    sorted.push_back(graph.nodes[n]);
    for (std::size_t reader : readers[n]) {
      if (--waiting_on[reader] == 0) ready.push_back(reader);
    }
  }
  if (sorted.size() != count) {
    const std::size_t n = node_on_cycle(graph, producer, done);
    throw InvalidArgument(graph.where() + ": the graph has a cycle through " + graph.nodes[n].where() +
                          " (it depends on its own outputs)");
  }
  graph.nodes = std::move(sorted);
}

}  // namespace tessera::onnx
