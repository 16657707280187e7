#!/usr/bin/python3
"""Writes the ONNX models test_capi_onnx runs: y = tanh(x W + b), x float64[2, 3],
W [3, 4] and b [4] as initializers (the values test_capi_onnx.c computes by hand); and,
for the split run, a field model y = tanh(conv3x3(x) + b) on x float64[1, 2, 7, 8] (pads 1).

    make_capi_model.py OUT.onnx [FIELD.onnx]
"""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

W = np.array([[0.1, -0.2, 0.3, 0.4], [0.5, -0.6, 0.7, 0.8], [-0.9, 1.0, 0.2, -0.3]])
B = np.array([0.05, -0.1, 0.15, 0.2])

graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "W"], ["xw"], name="/matmul"),
     helper.make_node("Add", ["xw", "b"], ["z"], name="/add"),
     helper.make_node("Tanh", ["z"], ["y"], name="/tanh")],
    "capi_mlp",
    [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3])],
    [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 4])],
    [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")])
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])

if len(sys.argv) > 2:
    rng = np.random.default_rng(7)
    conv_w, conv_b = rng.standard_normal((2, 2, 3, 3)) * 0.3, rng.standard_normal(2) * 0.1
    field = helper.make_graph(
        [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="/conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
         helper.make_node("Tanh", ["c"], ["y"], name="/tanh")],
        "capi_field",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 2, 7, 8])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [1, 2, 7, 8])],
        [numpy_helper.from_array(conv_w, "cw"), numpy_helper.from_array(conv_b, "cb")])
    save(helper.make_model(field, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[2])
