"""Op type -> op class, Fathom's grouping (Adolf et al., IISWC 2016), in one table. Pure: no TF.

Why a table of types and not of node names: a trace records the type each kernel ran, and a type
means the same arithmetic in every model. Rules, in order:

1. the explicit table below (TensorFlow 2.21 op types as a trace reports them: oneDNN prefixes
   already removed by ``tf_autopar.tracing.normalize_type``);
2. the heavy-op table of ``tf_autopar.graph.heavy_ops`` (convolution, matmul, embedding,
   recurrent, and their gradients), so both tables never disagree;
3. families by name: ``*Apply*`` optimizer kernels, ``Random*``/``StatelessRandom*`` sampling,
   ``TensorList*``/``TensorArray*`` buffers;
4. a gradient kernel (``XGrad``, ``XGradV2``, ``XBackpropInput``...) goes with its forward op X;
5. anything else is "other", and ``classify_types`` names it as unknown so a report can say
   which types it could not place.

Choices worth knowing: pooling and batch/layer normalisation count as reductions; a gather's
gradient (``UnsortedSegmentSum``) as embedding and gather; ``Assign*VariableOp`` as optimizer
updates (Keras 3 optimizers do their arithmetic in element-wise ops, which count as element-wise:
the optimizer class is a lower bound); random sampling, input pipelines and string ops are
known "other".
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from tf_autopar.graph.heavy_ops import heavy_class

CONVOLUTION = "convolution"
MATMUL = "matrix multiply"
ELEMENTWISE = "element-wise arithmetic"
REDUCTION = "reductions and normalisation"
EMBEDDING = "embedding and gather"
DATA_MOVEMENT = "data movement and reshaping"
RECURRENT = "recurrent cells"
OPTIMIZER = "optimizer updates"
OTHER = "other"

#: The classes in report order.
OP_CLASSES: tuple[str, ...] = (
    CONVOLUTION,
    MATMUL,
    ELEMENTWISE,
    REDUCTION,
    EMBEDDING,
    DATA_MOVEMENT,
    RECURRENT,
    OPTIMIZER,
    OTHER,
)

#: Short names for tables, also accepted wherever a class is named.
SHORT: Mapping[str, str] = {
    CONVOLUTION: "conv",
    MATMUL: "matmul",
    ELEMENTWISE: "elem",
    REDUCTION: "reduce/norm",
    EMBEDDING: "embed/gather",
    DATA_MOVEMENT: "data mvmt",
    RECURRENT: "recurrent",
    OPTIMIZER: "optim",
    OTHER: "other",
}

_HEAVY_TO_CLASS = {"convolution": CONVOLUTION, "matmul": MATMUL, "embedding": EMBEDDING, "recurrent": RECURRENT}

_TABLE_SRC: dict[str, str] = {
    CONVOLUTION: "Conv Conv2D Conv3D DepthwiseConv2dNative _FusedConv2D _FusedConv3D _FusedDepthwiseConv2dNative "
    "FusedPadConv2D FusedResizeAndPadConv2D Conv2DBackpropInput Conv2DBackpropFilter "
    "Conv2DBackpropFilterWithBias Conv3DBackpropInputV2 Conv3DBackpropFilterV2 "
    "DepthwiseConv2dNativeBackpropInput DepthwiseConv2dNativeBackpropFilter PadWithConv2D "
    "PadWithFusedConv2D",
    MATMUL: "MatMul BatchMatMul BatchMatMulV2 BatchMatMulV3 Einsum _FusedMatMul _FusedBatchMatMulV2 SparseMatMul "
    "SparseTensorDenseMatMul",
    ELEMENTWISE: "Add AddV2 AddN Sub Mul MulNoNan RealDiv Div DivNoNan FloorDiv FloorMod TruncateDiv TruncateMod Mod "
    "Maximum Minimum Pow Square SquaredDifference Sqrt Rsqrt Exp Expm1 Log Log1p Neg Abs Sign "
    "Reciprocal Inv Floor Ceil Round Rint Relu Relu6 Elu Selu LeakyRelu Sigmoid Tanh Softplus "
    "Softsign Erf Erfc Gelu Swish _MklSwish Sin Cos Tan Atan Atan2 Asin Acos Sinh Cosh Xdivy Xlogy "
    "Xlog1py BiasAdd BiasAddV1 Less LessEqual Greater GreaterEqual Equal NotEqual LogicalAnd "
    "LogicalOr LogicalNot Select SelectV2 Cast ClipByValue IsFinite IsNan IsInf ZerosLike OnesLike "
    "ReluGrad Relu6Grad EluGrad SeluGrad LeakyReluGrad SigmoidGrad TanhGrad SoftplusGrad "
    "SoftsignGrad RsqrtGrad SqrtGrad ReciprocalGrad InvGrad GeluGrad _FusedMulAdd _FusedMulAdd2 "
    "_FusedAddN BitwiseAnd BitwiseOr BitwiseXor LeftShift RightShift Invert Polygamma Lgamma "
    "Digamma Igamma Igammac BesselI0e BesselI1e",
    REDUCTION: "Sum Mean Max Min Prod All Any ArgMax ArgMin EuclideanNorm Softmax LogSoftmax "
    "SparseSoftmaxCrossEntropyWithLogits SoftmaxCrossEntropyWithLogits FusedBatchNorm "
    "FusedBatchNormV2 FusedBatchNormV3 FusedBatchNormGrad FusedBatchNormGradV2 FusedBatchNormGradV3 "
    "_FusedBatchNormEx _FusedBatchNormGradEx LayerNorm _MklLayerNorm BiasAddGrad MaxPool MaxPoolV2 "
    "AvgPool MaxPool3D AvgPool3D MaxPoolGrad MaxPoolGradV2 MaxPoolGradGrad AvgPoolGrad MaxPool3DGrad "
    "AvgPool3DGrad MaxPoolWithArgmax MaxPoolGradWithArgmax LRN LRNGrad L2Loss Cumsum Cumprod "
    "CumulativeLogsumexp TopKV2 InTopK InTopKV2 BatchNormWithGlobalNormalization "
    "_FusedInstanceNorm Bincount DenseBincount",
    EMBEDDING: "Gather GatherV2 ResourceGather GatherNd ResourceGatherNd SparseSegmentSum SparseSegmentMean "
    "SparseSegmentSqrtN SparseSegmentSumWithNumSegments SparseSegmentMeanWithNumSegments "
    "SparseSegmentSqrtNWithNumSegments SparseSegmentSumGrad SparseSegmentMeanGrad SparseSegmentSqrtNGrad "
    "SparseSegmentSumGradV2 SparseSegmentMeanGradV2 SparseSegmentSqrtNGradV2 UnsortedSegmentSum "
    "UnsortedSegmentMax UnsortedSegmentMin UnsortedSegmentProd SegmentSum SegmentMean SegmentMax "
    "SegmentMin SegmentProd ScatterNd TensorScatterUpdate TensorScatterAdd TensorScatterSub "
    "ResourceScatterAdd ResourceScatterSub ResourceScatterUpdate ResourceScatterNdAdd "
    "ResourceScatterNdUpdate EmbeddingLookup OneHot",
    DATA_MOVEMENT: "Reshape Transpose ConjugateTranspose Concat ConcatV2 ConcatOffset Split SplitV Slice StridedSlice "
    "StridedSliceGrad ResourceStridedSliceAssign TensorStridedSliceUpdate Pack Unpack Tile TileGrad "
    "Pad PadV2 MirrorPad MirrorPadGrad Squeeze ExpandDims Identity IdentityN Snapshot Copy CopyHost "
    "DeepCopy Fill Shape ShapeN Size Rank BroadcastTo BroadcastArgs BroadcastGradientArgs Range "
    "LinSpace Reverse ReverseV2 ReverseSequence SpaceToBatchND BatchToSpaceND SpaceToDepth "
    "DepthToSpace ResizeBilinear ResizeNearestNeighbor ResizeBilinearGrad "
    "ResizeNearestNeighborGrad Const ReadVariableOp VarHandleOp VariableV2 Variable "
    "CheckNumerics CheckNumericsV2 EnsureShape StopGradient PreventGradient InplaceUpdate "
    "InplaceAdd DynamicStitch ParallelDynamicStitch DynamicPartition Where Unique UniqueV2 "
    "MatrixDiag MatrixDiagV3 MatrixDiagPart MatrixDiagPartV3 MatrixBandPart MatrixSetDiagV3 "
    "_MklToTf _MklInputConversion Bitcast Empty Placeholder PlaceholderWithDefault "
    "Enter Exit Merge Switch NextIteration LoopCond",
    OPTIMIZER: "AssignVariableOp AssignAddVariableOp AssignSubVariableOp Assign AssignAdd AssignSub "
    "ResourceApplyGradientDescent ResourceApplyMomentum ResourceApplyKerasMomentum ResourceApplyAdam "
    "ResourceApplyAdamWithAmsgrad ResourceApplyAdagrad ResourceApplyAdagradV2 ResourceApplyRMSProp "
    "ResourceApplyCenteredRMSProp ResourceApplyAdadelta ResourceApplyFtrl ResourceApplyFtrlV2 "
    "ResourceApplyAdaMax ResourceApplyAddSign ResourceApplyPowerSign ResourceApplyProximalAdagrad "
    "ResourceApplyProximalGradientDescent ApplyGradientDescent ApplyMomentum ApplyAdam ApplyAdagrad "
    "ApplyRMSProp",
    OTHER: "RandomUniform RandomUniformInt RandomStandardNormal TruncatedNormal RandomShuffle Multinomial "
    "RandomGamma RandomPoisson RandomPoissonV2 StatelessRandomUniform StatelessRandomUniformV2 "
    "StatelessRandomNormal StatelessRandomNormalV2 StatelessTruncatedNormal StatelessTruncatedNormalV2 "
    "StatelessRandomUniformInt StatelessRandomUniformIntV2 StatelessRandomGetKeyCounter "
    "StatelessRandomGetKeyCounterAlg StatelessRandomGetAlg StatelessMultinomial RngReadAndSkip "
    "RngSkip IteratorGetNext IteratorGetNextSync OptionalGetValue OptionalHasValue StringToHashBucketFast "
    "StringToHashBucketStrong StringToHashBucket AsString StringJoin Print PrintV2 Assert "
    "DestroyResourceOp VarIsInitializedOp",
}

#: op type -> class, exact (each type in one class: a test checks).
OP_CLASS_TABLE: Mapping[str, str] = {t: cls for cls, src in _TABLE_SRC.items() for t in src.split()}

_GRAD_SUFFIX = re.compile(r"(?:Grad(?:V\d)?|Backprop(?:Input|Filter)(?:V\d)?|GradGrad|GradWithArgmax)$")


def _heavy(op_type: str) -> str | None:
    heavy = heavy_class(op_type)
    return _HEAVY_TO_CLASS.get(heavy) if heavy else None


def _known(op_type: str) -> str | None:
    """The class from the table, the heavy-op table or a family rule; None if unknown."""
    from tf_autopar.tracing.model import normalize_type  # here: it imports numpy, the CLI's parser must not

    raw = op_type.rsplit("/", 1)[-1]  # "eager/MatMul" -> "MatMul"
    t = normalize_type(raw)
    if t in OP_CLASS_TABLE:
        return OP_CLASS_TABLE[t]
    heavy = _heavy(raw) or _heavy(t)
    if heavy:
        return heavy
    if re.match(r"^(?:Resource)?(?:Sparse)?Apply[A-Z]", t):
        return OPTIMIZER
    if t.startswith(("Random", "StatelessRandom", "Stateless")):
        return OTHER
    if t.startswith(("TensorList", "TensorArray")):
        return DATA_MOVEMENT
    forward = _GRAD_SUFFIX.sub("", t)
    if forward and forward != t:
        return _known(forward)
    return None


def classify(op_type: str) -> str:
    """The op class of one op type ("other" when unknown)."""
    return _known(op_type) or OTHER


def is_known(op_type: str) -> bool:
    """True when a rule (not the catch-all) places ``op_type``."""
    return _known(op_type) is not None


def check_classes(names: Iterable[str]) -> list[str]:
    """``names`` as op classes, in OP_CLASSES order; ValueError naming the valid ones."""
    names = [n.strip() for n in names if n.strip()]
    by_key = {c: c for c in OP_CLASSES} | {c.split()[0]: c for c in OP_CLASSES} | {v: k for k, v in SHORT.items()}
    bad = [n for n in names if n not in by_key]
    if bad:
        raise ValueError(
            f"unknown op class {', '.join(repr(b) for b in bad)}; choose from "
            + ", ".join(repr(c) for c in OP_CLASSES)
            + " (or their first word, or "
            + ", ".join(SHORT.values())
            + ")"
        )
    chosen = {by_key[n] for n in names}
    return [c for c in OP_CLASSES if c in chosen]


def class_times(type_times: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
    """Op type -> seconds summed into op class -> seconds (every class present, 0 when absent),
    and the types no rule placed (they are in "other")."""
    out = dict.fromkeys(OP_CLASSES, 0.0)
    unknown = []
    for t, s in type_times.items():
        cls = _known(t)
        if cls is None:
            cls = OTHER
            unknown.append(t)
        out[cls] += float(s)
    return out, sorted(unknown)


def shares(times: Mapping[str, float]) -> dict[str, float]:
    """Seconds per class -> fractions of their sum (all zero when nothing was recorded)."""
    total = sum(times.values())
    return {k: (v / total if total > 0 else 0.0) for k, v in times.items()}
