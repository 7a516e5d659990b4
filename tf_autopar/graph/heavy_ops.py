"""Which TensorFlow operators are "heavy", decided by op TYPE from the table below.

The parallelism guideline (Wang et al., TACO 2021) sets the inter-op pool to the
graph's average width counted over *heavy* operators: the ones that carry almost all
the arithmetic and that the inter-op scheduler can overlap. The authors' tuner matched
node-name substrings ('MatMul', 'Conv', 'embedding_lookup'), which misses renamed
layers and counts anything whose scope happens to contain the word. We decide by the
op type recorded in the NodeDef instead.

Every name in the table was checked against the ops registered by TensorFlow 2.21
(``TF_GetAllOpList``; a test re-checks it). The oneDNN names are what TF's graph
rewrite actually runs on x86 CPUs: a Keras Conv2D/DepthwiseConv2D/Dense/matmul/einsum
model traced with step stats ran ``_MklNativeConv2D``, ``_MklNativeDepthwiseConv2dNative``,
``_MklMatMul``, ``_MklBatchMatMulV2`` and ``_MklEinsum``. Such rewritten ops only appear in
runtime partition graphs (RunMetadata) or graphs dumped after rewrite, not in saved or
traced graphs, but we accept them so those dumps analyse the same way.

Classes and why each is heavy:

- convolution: Conv2D/Conv3D/DepthwiseConv2dNative, the generic ``Conv``, their
  backprop-input and backprop-filter ops (the same O(N*K*C) arithmetic as the forward
  op, run per training step), grappler's fused variants (``_FusedConv2D`` = conv+bias+
  activation), the oneDNN rewrites (``_Mkl*``, ``_MklNative*``) and quantized forms.
- matmul: MatMul, BatchMatMul{,V2,V3}, Einsum (lowered to a contraction), SparseMatMul,
  sparse-dense products, the fused/oneDNN/quantized variants. Dense layers, attention
  and recurrent gates all run here.
- embedding: look-ups into a large table, the heavy operators of recommendation
  models (the paper counts them for NCF / Wide&Deep): ``ResourceGather`` (gather from
  a resource variable) always; ``GatherV2``/``Gather`` only when its params input is a
  table (see ``EMBEDDING_TABLE_SOURCES``): Keras 3's Embedding layer emits ``GatherV2``
  on a ``ReadVariableOp``, frozen graphs emit it on a 2-D ``Const``, while ``GatherV2`` on
  a shape vector is bookkeeping and stays light; ``SparseSegmentSum/Mean/SqrtN``
  (+``WithNumSegments``) (the combiner of ``embedding_lookup_sparse``) and their grads.
  A look-up whose static output has fewer than ``MIN_LOOKUP_ELEMENTS`` elements (a few
  rows at batch 1) is light: Wide&Deep at batch 1 has 60 such look-ups, which made its
  width 13, and two inter-op threads ran it 6% slower than one (docs/design.md, "Small ops").
- recurrent: fused recurrent cells that run a whole gate matmul (or a whole sequence)
  in one kernel: LSTMBlockCell, BlockLSTM{,V2}, GRUBlockCell, CudnnRNN{,V2,V3}, and
  their gradients. (Keras 3 LSTM/GRU on CPU unroll into MatMuls inside a While loop,
  which are counted as matmuls.)

Not heavy: element-wise ops, reductions, pooling, batch norm, softmax, concat,
optimizer updates, tf.data ops. They cost time but scale with intra-op threads and
would only dilute the width.
"""

from __future__ import annotations

import re

CONVOLUTION = "convolution"
MATMUL = "matmul"
EMBEDDING = "embedding"
RECURRENT = "recurrent"

_CONV_FORWARD = (
    "Conv",
    "Conv2D",
    "Conv3D",
    "DepthwiseConv2dNative",
    "FusedPadConv2D",
    "FusedResizeAndPadConv2D",
    "_FusedConv2D",
    "_FusedConv3D",
    "_FusedDepthwiseConv2dNative",
    "_MklConv2D",
    "_MklConv2DWithBias",
    "_MklConv3D",
    "_MklDepthwiseConv2dNative",
    "_MklFusedConv2D",
    "_MklFusedDepthwiseConv2dNative",
    "_MklPadWithConv2D",
    "_MklPadWithFusedConv2D",
    "_MklNativeConv2D",
    "_MklNativeConv2DWithBias",
    "_MklNativeConv3D",
    "_MklNativeDepthwiseConv2dNative",
    "_MklNativeFusedConv2D",
    "_MklNativeFusedConv3D",
    "_MklNativeFusedDepthwiseConv2dNative",
    "_MklNativePadWithConv2D",
    "_MklNativePadWithFusedConv2D",
    "QuantizedConv2D",
    "QuantizedConv2DAndRelu",
    "QuantizedConv2DAndReluAndRequantize",
    "QuantizedConv2DAndRequantize",
    "QuantizedConv2DPerChannel",
    "QuantizedConv2DWithBias",
    "QuantizedConv2DWithBiasAndRelu",
    "QuantizedConv2DWithBiasAndReluAndRequantize",
    "QuantizedConv2DWithBiasAndRequantize",
    "QuantizedConv2DWithBiasSignedSumAndReluAndRequantize",
    "QuantizedConv2DWithBiasSumAndRelu",
    "QuantizedConv2DWithBiasSumAndReluAndRequantize",
    "QuantizedDepthwiseConv2D",
    "QuantizedDepthwiseConv2DWithBias",
    "QuantizedDepthwiseConv2DWithBiasAndRelu",
    "QuantizedDepthwiseConv2DWithBiasAndReluAndRequantize",
    "_FusedQuantizedConv2D",
    "_FusedQuantizedDepthwiseConv2D",
    "_MklQuantizedConv2D",
    "_MklQuantizedConv2DAndRelu",
    "_MklQuantizedConv2DAndReluAndRequantize",
    "_MklQuantizedConv2DAndRequantize",
    "_MklQuantizedConv2DPerChannel",
    "_MklQuantizedConv2DWithBias",
    "_MklQuantizedConv2DWithBiasAndRelu",
    "_MklQuantizedConv2DWithBiasAndReluAndRequantize",
    "_MklQuantizedConv2DWithBiasAndRequantize",
    "_MklQuantizedConv2DWithBiasSignedSumAndReluAndRequantize",
    "_MklQuantizedConv2DWithBiasSumAndRelu",
    "_MklQuantizedConv2DWithBiasSumAndReluAndRequantize",
    "_MklQuantizedDepthwiseConv2D",
    "_MklQuantizedDepthwiseConv2DWithBias",
    "_MklQuantizedDepthwiseConv2DWithBiasAndRelu",
    "_MklQuantizedDepthwiseConv2DWithBiasAndReluAndRequantize",
    "UniformQuantizedConvolution",
    "UniformQuantizedConvolutionHybrid",
    "XlaConv",
    "XlaConvV2",
    "RiscConv",
)
_CONV_BACKPROP = (
    "Conv2DBackpropInput",
    "Conv2DBackpropInputV2",
    "Conv2DBackpropFilter",
    "Conv2DBackpropFilterV2",
    "Conv3DBackpropInput",
    "Conv3DBackpropInputV2",
    "Conv3DBackpropFilter",
    "Conv3DBackpropFilterV2",
    "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter",
    "_MklConv2DBackpropInput",
    "_MklConv2DBackpropFilter",
    "_MklConv2DBackpropFilterWithBias",
    "_MklConv3DBackpropInputV2",
    "_MklConv3DBackpropFilterV2",
    "_MklDepthwiseConv2dNativeBackpropInput",
    "_MklDepthwiseConv2dNativeBackpropFilter",
    "_MklNativeConv2DBackpropInput",
    "_MklNativeConv2DBackpropFilter",
    "_MklNativeConv2DBackpropFilterWithBias",
    "_MklNativeConv3DBackpropInputV2",
    "_MklNativeConv3DBackpropFilterV2",
    "_MklNativeDepthwiseConv2dNativeBackpropInput",
    "_MklNativeDepthwiseConv2dNativeBackpropFilter",
)
_MATMUL = (
    "MatMul",
    "BatchMatMul",
    "BatchMatMulV2",
    "BatchMatMulV3",
    "Einsum",
    "SparseMatMul",
    "SparseTensorDenseMatMul",
    "SparseMatrixMatMul",
    "_FusedMatMul",
    "_MklMatMul",
    "_MklFusedMatMul",
    "_MklNativeFusedMatMul",
    "_MklBatchMatMul",
    "_MklBatchMatMulV2",
    "_MklFusedBatchMatMulV2",
    "_MklEinsum",
    "_MklNativeSparseMatrixMatMul",
    "QuantizedMatMul",
    "QuantizedMatMulWithBias",
    "QuantizedMatMulWithBiasAndDequantize",
    "QuantizedMatMulWithBiasAndRelu",
    "QuantizedMatMulWithBiasAndReluAndRequantize",
    "QuantizedMatMulWithBiasAndRequantize",
    "_QuantizedMatMul",
    "_MklQuantizedMatMulWithBias",
    "_MklQuantizedMatMulWithBiasAndDequantize",
    "_MklQuantizedMatMulWithBiasAndRelu",
    "_MklQuantizedMatMulWithBiasAndReluAndRequantize",
    "_MklQuantizedMatMulWithBiasAndRequantize",
    "UniformQuantizedDot",
    "UniformQuantizedDotHybrid",
    "XlaDot",
    "XlaDotV2",
    "XlaEinsum",
    "RiscDot",
)
_EMBEDDING = (
    "ResourceGather",
    "SparseSegmentSum",
    "SparseSegmentMean",
    "SparseSegmentSqrtN",
    "SparseSegmentSumWithNumSegments",
    "SparseSegmentMeanWithNumSegments",
    "SparseSegmentSqrtNWithNumSegments",
)
_EMBEDDING_GRAD = (
    "SparseSegmentSumGrad",
    "SparseSegmentSumGradV2",
    "SparseSegmentMeanGrad",
    "SparseSegmentMeanGradV2",
    "SparseSegmentSqrtNGrad",
    "SparseSegmentSqrtNGradV2",
)
_RECURRENT = ("LSTMBlockCell", "BlockLSTM", "BlockLSTMV2", "GRUBlockCell", "CudnnRNN", "CudnnRNNV2", "CudnnRNNV3")
_RECURRENT_GRAD = (
    "LSTMBlockCellGrad",
    "BlockLSTMGrad",
    "BlockLSTMGradV2",
    "GRUBlockCellGrad",
    "CudnnRNNBackprop",
    "CudnnRNNBackpropV2",
    "CudnnRNNBackpropV3",
)

#: op type -> heavy class. Always heavy, wherever it appears.
HEAVY_OP_TYPES: dict[str, str] = {
    **{t: CONVOLUTION for t in _CONV_FORWARD + _CONV_BACKPROP},
    **{t: MATMUL for t in _MATMUL},
    **{t: EMBEDDING for t in _EMBEDDING + _EMBEDDING_GRAD},
    **{t: RECURRENT for t in _RECURRENT + _RECURRENT_GRAD},
}

#: Heavy op types that only exist in gradient computations (they mark a training graph).
GRADIENT_HEAVY_OP_TYPES: frozenset[str] = frozenset(_CONV_BACKPROP + _EMBEDDING_GRAD + _RECURRENT_GRAD)

#: Look-ups reading fewer elements than this (16 KB of float32) are light (see above).
MIN_LOOKUP_ELEMENTS = 4096

#: Gathers that are heavy only when their params input (input 0) is an embedding table.
CONDITIONAL_GATHER_OP_TYPES: frozenset[str] = frozenset({"GatherV2", "Gather"})

#: Producers of params that make a gather an embedding look-up: a variable read
#: (TF2/Keras 3), a TF1 variable, or a 2-D+ Const (a frozen table). Shape vectors are 1-D.
EMBEDDING_TABLE_SOURCES: frozenset[str] = frozenset(
    {"ReadVariableOp", "VarHandleOp", "VariableV2", "Variable", "_ReadVariablesOp", "Const"}
)
#: Ops looked through when finding the params' producer (TF1 reads a variable via Identity).
PASS_THROUGH_OP_TYPES: frozenset[str] = frozenset({"Identity", "Snapshot", "Enter", "RefIdentity"})

#: Dataset iteration ops: the graph pulls from tf.data (never plan 1 inter-op thread then).
_ITERATOR_OP_TYPES = frozenset(
    {
        "IteratorGetNext",
        "IteratorGetNextSync",
        "IteratorGetNextAsOptional",
        "MakeIterator",
        "Iterator",
        "IteratorV2",
        "OneShotIterator",
        "AnonymousIterator",
        "AnonymousIteratorV2",
        "AnonymousIteratorV3",
        "MultiDeviceIterator",
        "MultiDeviceIteratorGetNextFromShard",
    }
)

# Gradient name scopes: tf.gradients -> "gradients/", "gradients_1/"; GradientTape (and
# Keras 3's train_step) -> "gradient_tape/". Generic ops (MatMul, Mul...) in a backward
# pass carry nothing else that marks them as gradients.
_GRADIENT_SCOPE = re.compile(r"(?:^|/)(?:gradients(?:_\d+)?|gradient_tape)/")
# Backward function names in TF2 function libraries.
_GRADIENT_FUNCTION = re.compile(r"__backward_|_grad(?:_|$)|gradient_tape|(?:^|/|_)gradients(?:_\d+)?(?:/|_)")


def heavy_class(op_type: str) -> str | None:
    """The heavy class of an op type that is heavy everywhere, else None."""
    return HEAVY_OP_TYPES.get(op_type)


def is_gradient_op_type(op_type: str) -> bool:
    """Op types that exist only to compute gradients (Conv2DBackpropInput, BiasAddGrad, ReluGrad...)."""
    return (
        op_type in GRADIENT_HEAVY_OP_TYPES
        or "Backprop" in op_type
        or op_type.endswith(("Grad", "GradV2", "GradV3", "GradEx"))
        or op_type == "SymbolicGradient"
    )


def is_gradient_node_name(name: str) -> bool:
    """True for nodes built inside a gradient name scope."""
    return "gradient" in name and _GRADIENT_SCOPE.search(name) is not None


def is_gradient_function_name(name: str) -> bool:
    """True for function bodies that compute a backward pass (While/If/call gradients)."""
    return ("grad" in name or "backward" in name) and _GRADIENT_FUNCTION.search(name) is not None


def is_dataset_op_type(op_type: str) -> bool:
    """tf.data ops: iterators and datasets."""
    return op_type in _ITERATOR_OP_TYPES or "Dataset" in op_type


def is_table_const(node) -> bool:
    """A Const whose value has rank >= 2 (a frozen embedding table, not a shape vector)."""
    try:
        return len(node.attr["value"].tensor.tensor_shape.dim) >= 2
    except (AttributeError, KeyError, TypeError):
        return False
