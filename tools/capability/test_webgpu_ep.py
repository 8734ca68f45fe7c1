"""Checks of webgpu_ep.py's C-subset reader on a small made-up source tree (not ONNX Runtime's code).

    python3 -m unittest tools/capability/test_webgpu_ep.py
"""
import argparse
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import webgpu_ep  # noqa: E402

FILES = {
    webgpu_ep.TYPES_FILE: """
using SupportedNumberTypes = TypeList<float, MLFloat16, int32_t, uint32_t>;
using SupportedFloats = TypeList<float, MLFloat16>;
inline const std::vector<MLDataType>& WebGpuSupportedNumberTypes() {
  static const std::vector<MLDataType> t = BuildKernelDefConstraintsFromTypeList<SupportedNumberTypes>();
  return t;
}
inline const std::vector<MLDataType>& WebGpuSupportedFloatTypes() {
  static const std::vector<MLDataType> t = BuildKernelDefConstraintsFromTypeList<SupportedFloats>();
  return t;
}
inline const std::vector<MLDataType>& GetOpTypeConstraints(bool enable_int64 = false, bool enable_bool = false) {
  static std::vector<MLDataType> base_types{
      DataTypeImpl::GetTensorType<MLFloat16>(), DataTypeImpl::GetTensorType<float>()};
  return base_types;
}
""",
    webgpu_ep.EP_FILE: """
#define KERNEL_CREATE_INFO_VERSIONED(Start, End, Op) \\
  BuildKernelCreateInfo<class ONNX_OPERATOR_VERSIONED_KERNEL_CLASS_NAME(kWebGpuExecutionProvider, kOnnxDomain, Start, End, Op)>
static const BuildKernelCreateInfoFn table[] = {
    KERNEL_CREATE_INFO_VERSIONED(6, 12, Abs),
    BuildKernelCreateInfo<class ONNX_OPERATOR_KERNEL_CLASS_NAME(kWebGpuExecutionProvider, kOnnxDomain, 13, Shape)>,
    // BuildKernelCreateInfo<class ONNX_OPERATOR_KERNEL_CLASS_NAME(kWebGpuExecutionProvider, kOnnxDomain, 1, Gone)>,
    BuildKernelCreateInfo<class ONNX_OPERATOR_TYPED_KERNEL_CLASS_NAME(kWebGpuExecutionProvider, kOnnxDomain, 13, MLFloat16, Clip)>,
};
void RegisterKernels(bool enable_int64) {
  kernel_registry->Register(CreateExpandVersionedKernelInfo(8, 12, enable_int64));
  RegisterBinaryElementwiseKernels(*kernel_registry, enable_int64);
}
""",
    "onnxruntime/core/providers/webgpu/math/unary.cc": """
#define UNARY_VERSIONED(OP, A, B, TYPE) \\
  ONNX_OPERATOR_VERSIONED_KERNEL_EX(OP, kOnnxDomain, A, B, kWebGpuExecutionProvider, \\
      KernelDefBuilder().TypeConstraint("T", TYPE), OP);
UNARY_VERSIONED(Abs, 6, 12, WebGpuSupportedFloatTypes())
#define CLIP(TYPE) \\
  ONNX_OPERATOR_TYPED_KERNEL_EX(Clip, kOnnxDomain, 13, TYPE, kWebGpuExecutionProvider, \\
      KernelDefBuilder().TypeConstraint("T", DataTypeImpl::GetTensorType<TYPE>()) \\
          .InputMemoryType(OrtMemTypeCPU, 1).InputMemoryType(OrtMemTypeCPU, 2), Clip<TYPE>);
CLIP(float)
CLIP(MLFloat16)
""",
    "onnxruntime/core/providers/webgpu/tensor/shape_op.cc": """
ONNX_OPERATOR_KERNEL_EX(
    Shape, kOnnxDomain, 13, kWebGpuExecutionProvider,
    (*KernelDefBuilder::Create())
        .OutputMemoryType(OrtMemTypeCPU, 0)
        .TypeConstraint("T", WebGpuSupportedNumberTypes())
        .TypeConstraint("T1", DataTypeImpl::GetTensorType<int64_t>()),
    Shape);
""",
    "onnxruntime/core/providers/webgpu/tensor/expand.cc": """
template <int StartVersion, int EndVersion>
KernelCreateInfo CreateExpandVersionedKernelInfo(bool enable_int64) {
  const auto& type_constraints = GetOpTypeConstraints(enable_int64, true);
  return {KernelDefBuilder().SetName("Expand").SetDomain(kOnnxDomain)
              .TypeConstraint("T", type_constraints).InputMemoryType(OrtMemTypeCPU, 1).Build(), fn};
}
""",
    "onnxruntime/core/providers/webgpu/math/binary_elementwise_ops.cc": """
void RegisterBinaryElementwiseKernels(KernelRegistry& kernel_registry, bool enable_int64) {
  const auto& int64_capable = GetOpTypeConstraints(enable_int64, /*enable_bool=*/false);
  const auto& number_types = WebGpuSupportedNumberTypes();
  RegisterBinaryOp(kernel_registry, "Add", CreateBinaryOpKernel<Add>, int64_capable, {{7, 12}, {14, std::nullopt}});
  RegisterBinaryOp(kernel_registry, "Pow", CreateBinaryOpKernel<Pow>, number_types, {{15, std::nullopt}}, &number_types);
}
""",
}

SCHEMAS = [
    {"name": "Abs", "domain": "", "since": 6, "inputs": ["T"], "outputs": ["T"]},
    {"name": "Shape", "domain": "", "since": 13, "inputs": ["T"], "outputs": ["tensor(int64)"]},
    {"name": "Clip", "domain": "", "since": 13, "inputs": ["T", "T", "T"], "outputs": ["T"]},
    {"name": "Expand", "domain": "", "since": 8, "inputs": ["T", "tensor(int64)"], "outputs": ["T"]},
]


class WebGpuEpTest(unittest.TestCase):
    def build(self, enable_int64=False):
        root = tempfile.mkdtemp(prefix="webgpu_ep_test_")
        for rel, text in FILES.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        args = argparse.Namespace(ort_src=root, enable_int64=enable_int64)
        rows, approx, unresolved, _, types = webgpu_ep.build(args)
        return {(r[1], r[2], r[4]): r for r in rows}, approx, unresolved, types

    def test_rows(self):
        rows, approx, unresolved, types = self.build()
        self.assertEqual(types.helpers["WebGpuSupportedFloatTypes"], ["float", "float16"])
        by_op = {}
        for (op, since, _), r in rows.items():
            by_op.setdefault(op, []).append(r)
        self.assertNotIn("Gone", by_op)  # commented-out entry
        abs_row = by_op["Abs"][0]
        self.assertEqual(abs_row[3], "12")
        self.assertEqual(abs_row[4], "T=float,float16")
        shape = by_op["Shape"][0]
        self.assertEqual((shape[5], shape[6]), ("-", "0"))
        self.assertEqual(shape[4], "T=float,float16,int32,uint32;T1=int64")
        clip = by_op["Clip"]
        self.assertEqual([r[4] for r in clip], ["T=float16"])  # only the typed entry in the table
        self.assertEqual(clip[0][5], "1,2")
        expand = by_op["Expand"][0]
        self.assertEqual((expand[3], expand[4], expand[5]), ("12", "T=bool,float,float16", "1"))
        adds = sorted((r[2], r[3], r[4]) for r in by_op["Add"])
        self.assertEqual(adds, [(7, "12", "T=float,float16"), (14, "-", "T=float,float16")])
        self.assertEqual(by_op["Pow"][0][4], "T=float,float16,int32,uint32;T1=float,float16,int32,uint32")
        self.assertEqual(unresolved, [])

    def test_type_overrides(self):
        rows = [("ai.onnx", "Reshape", 5, "12", "T=float,int32;shape=int64", "1", "-"),
                ("ai.onnx", "Reshape", 13, "-", "T=float,int32;shape=int64", "1", "-"),
                ("ai.onnx", "Relu", 6, "-", "T=float", "-", "-")]
        text = "domain\top\tsince\tconstraint\ttypes\treason\nai.onnx\tReshape\t13\tT\tuint8\tseen\n"
        out, applied = webgpu_ep.apply_type_overrides(rows, text)
        self.assertEqual(out[0], rows[0])  # below `since`: unchanged
        self.assertEqual(out[1][4], "T=float,int32,uint8;shape=int64")
        self.assertEqual(out[2], rows[2])
        self.assertEqual(len(applied), 1)
        with self.assertRaises(SystemExit):  # an override that matches nothing is an error
            webgpu_ep.apply_type_overrides(rows, "ai.onnx\tGone\t1\tT\tuint8\tx\n")

    def test_int64_mode(self):
        rows, _, _, _ = self.build(enable_int64=True)
        adds = [r for (op, _, _), r in rows.items() if op == "Add"]
        self.assertTrue(all(r[4] == "T=float,float16,int64" for r in adds))

    def test_formal_and_schemas(self):
        s = webgpu_ep.Schemas(SCHEMAS)
        self.assertEqual(s.at("ai.onnx", "Abs", 12)["since"], 6)
        self.assertEqual(webgpu_ep.formal("tensor(int64)"), "int64")
        self.assertEqual(webgpu_ep.formal("T1"), "T1")
        self.assertIsNone(s.at("ai.onnx", "Nope", 1))
        json.dumps(SCHEMAS)


if __name__ == "__main__":
    unittest.main()
