#!/usr/bin/python3
"""Writes the seed corpus of fuzz_onnx (fuzz/corpus/fuzz_onnx/): small ONNX files made
with onnx.helper that cover the reader's paths (initializers raw and typed, an attribute
of every kind, a Constant tensor attribute, integer shape values, external data).

    /usr/bin/python3 fuzz/make_onnx_seeds.py fuzz/corpus/fuzz_onnx
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(name, nodes, inputs, outputs, initializers, opset=13):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())


x4 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])
# A convolution net: Conv (ints attributes), Relu, MaxPool, Flatten, Gemm (float attribute).
save("conv_net",
     [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
      helper.make_node("Relu", ["c"], ["r"]),
      helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
      helper.make_node("Flatten", ["p"], ["f"]),
      helper.make_node("Gemm", ["f", "g", "gb"], ["y"], transB=1, alpha=0.5)],
     [x4], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
     [numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w"),
      helper.make_tensor("b", TensorProto.FLOAT, [3], [0.1, 0.2, 0.3]),  # typed float_data
      numpy_helper.from_array(np.ones((4, 27), np.float32), "g"),
      numpy_helper.from_array(np.zeros(4, np.float32), "gb")])
# Integer shape values: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, a Constant.
save("shape_chain",
     [helper.make_node("Shape", ["x"], ["s"]),
      helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", TensorProto.INT64, [], [0])),
      helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
      helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
      helper.make_node("Concat", ["n1", "rest"], ["target"], axis=0),
      helper.make_node("Reshape", ["x", "target"], ["y"])],
     [x4], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 72])],
     [numpy_helper.from_array(np.array([0], np.int64), "axes"),
      numpy_helper.from_array(np.array([-1], np.int64), "rest")])
# f64, Softmax and LayerNormalization (opset 17), a string attribute (Resize's mode).
save("norm_resize",
     [helper.make_node("LayerNormalization", ["x", "scale"], ["n"], axis=-1, epsilon=1e-5),
      helper.make_node("Softmax", ["n"], ["s"], axis=1),
      helper.make_node("Resize", ["s", "", "scales"], ["y"], mode="nearest")],
     [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 2, 4, 4])],
     [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [1, 2, 8, 8])],
     [numpy_helper.from_array(np.ones(4), "scale"),
      numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")], opset=17)
# External data: the reader must refuse or confine the path.
ext = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
ext.ClearField("float_data")
ext.data_location = TensorProto.EXTERNAL
for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", "8")):
    entry = ext.external_data.add()
    entry.key, entry.value = key, value
save("external_data",
     [helper.make_node("Mul", ["x", "w"], ["y"])],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [ext])
