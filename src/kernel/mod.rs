//! rdml's own CPU kernels for the Flex backend, plugged into burn through a backend extension
//! with hand-written backward passes. Every entry point falls back to burn's operation where
//! a kernel does not apply (another backend, another dtype, grouped convolution, `Same` padding),
//! so models call these unconditionally. Stride-1 convolutions with whole 16-channel groups run
//! the direct AVX-512 kernels of [`direct`], the rest im2col + GEMM ([`conv`]).

pub mod adam;
pub mod conv;
pub mod direct;
pub mod dots;
pub mod pool;
pub mod shared;

use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, Flex, TensorMetadata, backend_extension};
use burn::nn::PaddingConfig2d;
use burn::nn::conv::Conv2d;
use burn::nn::pool::MaxPool2d;
use burn::tensor::{DType, Device, Shape, Tensor, TensorData};
pub use conv::Geometry;
pub use pool::PoolGeometry;
pub use shared::avx512;
use std::sync::Arc;

#[backend_extension(Flex, Autodiff)]
pub trait Kernels: Backend {
    /// 2-D convolution without bias, groups = 1, NCHW.
    fn rdml_conv2d(x: FloatTensor<Self>, weight: FloatTensor<Self>, geometry: Geometry) -> FloatTensor<Self>;
    /// 2-D convolution with a per-channel bias, groups = 1, NCHW.
    fn rdml_conv2d_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        geometry: Geometry,
    ) -> FloatTensor<Self>;
    /// 2-D max pooling, NCHW, no dilation, floor mode.
    fn rdml_max_pool2d(x: FloatTensor<Self>, geometry: PoolGeometry) -> FloatTensor<Self>;
}

fn host(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(
            t.to_contiguous()
                .as_slice::<f32>()
                .expect("rdml kernels are only routed f32 tensors")
                .to_vec(),
        ),
    }
}

fn flex(values: Vec<f32>, shape: [usize; 4]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, Shape::new(shape)))
}

fn dims4(t: &FlexTensor) -> [usize; 4] {
    let s = t.shape();
    [s[0], s[1], s[2], s[3]]
}

fn forward(x: &FlexTensor, weight: &FlexTensor, bias: Option<&FlexTensor>, g: Geometry) -> FlexTensor {
    let [n, _, _, _] = dims4(x);
    let c_out = weight.shape()[0];
    let (c_in, bias) = (weight.shape()[1], bias.map(host));
    let (x, weight, bias) = (host(x), host(weight), bias.as_deref());
    let y = match g.direct(c_in, c_out).filter(direct::forward_applies) {
        Some(s) => direct::forward(&x, n, &weight, bias, &s),
        None => conv::forward(&x, n, &weight, c_out, bias, &g),
    };
    flex(y, [n, c_out, g.output[0], g.output[1]])
}

impl Kernels for Flex {
    fn rdml_conv2d(x: FlexTensor, weight: FlexTensor, g: Geometry) -> FlexTensor {
        forward(&x, &weight, None, g)
    }
    fn rdml_conv2d_bias(x: FlexTensor, weight: FlexTensor, bias: FlexTensor, g: Geometry) -> FlexTensor {
        forward(&x, &weight, Some(&bias), g)
    }
    fn rdml_max_pool2d(x: FlexTensor, g: PoolGeometry) -> FlexTensor {
        pool_forward(&x, &g).0
    }
}

fn pool_forward(x: &FlexTensor, g: &PoolGeometry) -> (FlexTensor, Vec<u32>) {
    let [n, c, _, _] = dims4(x);
    let (y, idx) = pool::forward(&host(x), g);
    (flex(y, [n, c, g.output[0], g.output[1]]), idx)
}

/// Backward of [`Kernels::rdml_max_pool2d`]: the argmax offsets and the input's shape.
#[derive(Debug)]
struct MaxPoolBackward;

impl Backward<Flex, 1> for MaxPoolBackward {
    type State = (Arc<Vec<u32>>, [usize; 4], PoolGeometry);
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        let (idx, x_dims, g) = ops.state;
        if let Some(node) = &ops.parents[0] {
            let dx = pool::backward(&host(&grad), &idx, &g);
            grads.register::<Flex>(node.id, flex(dx, x_dims));
        }
    }
}

fn input_grad(weight: &FlexTensor, grad: &FlexTensor, x_dims: [usize; 4], g: &Geometry) -> FlexTensor {
    let [n, c_in, h, w] = x_dims;
    let c_out = weight.shape()[0];
    let (grad, weight) = (host(grad), host(weight));
    let dx = match g.direct(c_in, c_out).filter(direct::input_grad_applies) {
        Some(s) => direct::input_grad(&grad, n, &weight, &s),
        None => conv::input_grad(&grad, n, &weight, c_in, c_out, g),
    };
    flex(dx, [n, c_in, h, w])
}

fn weight_grad(x: &FlexTensor, grad: &FlexTensor, w_dims: [usize; 4], g: &Geometry) -> FlexTensor {
    let [c_out, c_in, _, _] = w_dims;
    let n = x.shape()[0];
    let (x, grad) = (host(x), host(grad));
    let dw = match g.direct(c_in, c_out).filter(direct::weight_grad_applies) {
        Some(s) => direct::weight_grad(&x, n, &grad, &s),
        None => conv::weight_grad(&x, n, &grad, c_in, c_out, g),
    };
    flex(dw, w_dims)
}

fn bias_grad(grad: &FlexTensor) -> FlexTensor {
    let [n, c_out, _, _] = dims4(grad);
    let db = conv::bias_grad(&host(grad), n, c_out);
    FlexTensor::from_data(TensorData::new(db, Shape::new([c_out])))
}

/// Backward of [`Kernels::rdml_conv2d`] with a bias (parents x, weight, bias).
#[derive(Debug)]
struct ConvWithBias;
/// Backward of [`Kernels::rdml_conv2d`] without a bias (parents x, weight).
#[derive(Debug)]
struct ConvNoBias;

type ConvState = (NodeId, NodeId, Geometry);

fn conv_backward<const N: usize>(ops: Ops<ConvState, N>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
    let grad = grads.consume::<Flex>(&ops.node);
    let (x_id, w_id, g) = ops.state;
    let x: FlexTensor = checkpointer.retrieve_node_output(x_id);
    let weight: FlexTensor = checkpointer.retrieve_node_output(w_id);
    if let Some(node) = &ops.parents[0] {
        grads.register::<Flex>(node.id, input_grad(&weight, &grad, dims4(&x), &g));
    }
    if let Some(node) = &ops.parents[1] {
        grads.register::<Flex>(node.id, weight_grad(&x, &grad, dims4(&weight), &g));
    }
    if N == 3
        && let Some(node) = &ops.parents[N - 1]
    {
        grads.register::<Flex>(node.id, bias_grad(&grad));
    }
}

impl Backward<Flex, 3> for ConvWithBias {
    type State = ConvState;
    fn backward(self, ops: Ops<ConvState, 3>, grads: &mut Gradients, ck: &mut Checkpointer) {
        conv_backward(ops, grads, ck)
    }
}

impl Backward<Flex, 2> for ConvNoBias {
    type State = ConvState;
    fn backward(self, ops: Ops<ConvState, 2>, grads: &mut Gradients, ck: &mut Checkpointer) {
        conv_backward(ops, grads, ck)
    }
}

type AdTensor<C> = FloatTensor<Autodiff<Flex, C>>;

impl<C: CheckpointStrategy> Kernels for Autodiff<Flex, C> {
    fn rdml_conv2d(x: AdTensor<C>, weight: AdTensor<C>, g: Geometry) -> AdTensor<C> {
        let y = forward(x.primitive(), weight.primitive(), None, g);
        match ConvNoBias
            .prepare::<C>([x.node(), weight.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = (prep.checkpoint(&x), prep.checkpoint(&weight), g);
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn rdml_conv2d_bias(x: AdTensor<C>, weight: AdTensor<C>, bias: AdTensor<C>, g: Geometry) -> AdTensor<C> {
        let y = forward(x.primitive(), weight.primitive(), Some(bias.primitive()), g);
        match ConvWithBias
            .prepare::<C>([x.node(), weight.node(), bias.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = (prep.checkpoint(&x), prep.checkpoint(&weight), g);
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn rdml_max_pool2d(x: AdTensor<C>, g: PoolGeometry) -> AdTensor<C> {
        match MaxPoolBackward.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (y, idx) = pool_forward(x.primitive(), &g);
                prep.finish((Arc::new(idx), dims4(x.primitive()), g), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(pool_forward(x.primitive(), &g).0),
        }
    }
}

/// Whether rdml's Flex kernels can run on tensors of this device and dtype.
fn routable(device: &Device, dtype: DType) -> bool {
    dtype == DType::F32 && device.clone().inner() == Device::flex()
}

/// `conv.forward(x)` through rdml's kernels where they apply (same result, same parameters).
pub fn conv2d(conv: &Conv2d, x: Tensor<4>) -> Tensor<4> {
    let [_, _, h, w] = x.dims();
    let padding = match conv.padding {
        PaddingConfig2d::Valid => [(0, 0), (0, 0)],
        PaddingConfig2d::Explicit(top, left, bottom, right) => [(top, bottom), (left, right)],
        PaddingConfig2d::Same => return conv.forward(x),
    };
    let weight = conv.weight.val();
    let geometry = Geometry::new(conv.stride, padding, conv.dilation, conv.kernel_size, [h, w]);
    let routed = conv.groups == 1 && routable(&x.device(), x.dtype()) && weight.dtype() == DType::F32;
    let Some(g) = geometry.filter(|_| routed) else {
        return conv.forward(x);
    };
    let (x, weight) = (x.into_dispatch(), weight.into_dispatch());
    Tensor::from_dispatch(match &conv.bias {
        Some(b) => <Dispatch as Kernels>::rdml_conv2d_bias(x, weight, b.val().into_dispatch(), g),
        None => <Dispatch as Kernels>::rdml_conv2d(x, weight, g),
    })
}

/// `pool.forward(x)` through rdml's kernel where it applies (no dilation, floor mode,
/// symmetric explicit padding), else burn's.
pub fn max_pool2d(pool: &MaxPool2d, x: Tensor<4>) -> Tensor<4> {
    let [_, _, h, w] = x.dims();
    let pad = match pool.padding {
        PaddingConfig2d::Valid => [0, 0],
        PaddingConfig2d::Explicit(top, left, bottom, right) if top == bottom && left == right => [top, left],
        _ => return pool.forward(x),
    };
    let routed = pool.dilation == [1, 1] && !pool.ceil_mode && routable(&x.device(), x.dtype());
    let geometry = PoolGeometry::new(pool.kernel_size, pool.stride, pad, [h, w]);
    let Some(g) = geometry.filter(|_| routed) else {
        return pool.forward(x);
    };
    Tensor::from_dispatch(<Dispatch as Kernels>::rdml_max_pool2d(x.into_dispatch(), g))
}
