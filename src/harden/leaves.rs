//! The caller's embeddings as rdml's losses take them: checked (rows, one width, finite values,
//! unit length where the loss's distance assumes it), made leaves of burn's autodiff on rdml's
//! device, and, once a loss of them is built, its value and its gradient with respect to each
//! leaf (and to the loss's own β) read back for the caller's backward.

use crate::loss::{LossConfig, LossParams};
use anyhow::Result;
use burn::module::Param;
use burn::tensor::{Device, Tensor, TensorData};

/// One array of embeddings as the caller passed it: its values (row-major, widened to float32),
/// its rows, and the significand bits of the type the caller computed them in (24 for float32;
/// 11 for float16, 8 for bfloat16 under autocast), which the unit-length check allows for.
pub struct Given {
    pub values: Vec<f32>,
    pub rows: usize,
    pub significand: u32,
}

impl Given {
    /// Float32 embeddings.
    pub fn f32(values: Vec<f32>, rows: usize) -> Self {
        Self {
            values,
            rows,
            significand: 24,
        }
    }
}

/// The significand bits of the floating type a front end names (`None`: float32), for
/// [`Given::significand`].
pub fn significand_bits(dtype: Option<&str>) -> Result<u32> {
    Ok(match dtype.unwrap_or("float32") {
        "float32" | "float64" => 24,
        "float16" => 11,
        "bfloat16" => 8,
        other => {
            return Err(crate::input_error(format!(
                "dtype: {other:?}; expected the embeddings' floating type: float32, float64, float16 or bfloat16"
            )));
        }
    })
}

/// `given` as a `[rows, d]` autodiff leaf on `device` (plain; its autodiff twin is used), checked
/// in this order: `rows` rows, whole rows of one width (that of the arrays before it: `dim`,
/// `None` for the first), finite values, and unit length where `loss`'s distance assumes it;
/// `what` names it in errors.
pub fn leaf(
    given: Given,
    rows: usize,
    dim: &mut Option<usize>,
    (what, loss): (&str, &LossConfig),
    device: &Device,
) -> Result<Tensor<2>> {
    crate::ensure_input!(
        given.rows == rows,
        "{what}: {} rows; expected {rows} (one per image the defense handed back, in order)",
        given.rows
    );
    let n = given.values.len();
    crate::ensure_input!(
        if rows == 0 {
            n == 0
        } else {
            n.is_multiple_of(rows) && n >= rows
        },
        "{what}: {n} values for {rows} rows; expected {rows} × D embeddings"
    );
    let d = n.checked_div(rows).unwrap_or(0);
    let first = if rows == 0 {
        dim.unwrap_or(0)
    } else {
        *dim.get_or_insert(d)
    };
    crate::ensure_input!(
        rows == 0 || d == first,
        "{what}: {d}-dimensional embeddings after {first}-dimensional ones; the model must keep one width"
    );
    if let Some(i) = given.values.iter().position(|v| !v.is_finite()) {
        return Err(crate::input_error(format!(
            "{what}: a non-finite value ({}) in row {} (dimension {}); rdml's losses take finite embeddings only",
            given.values[i],
            i / first.max(1),
            i % first.max(1)
        )));
    }
    check_unit_length(&given.values, first, loss, (what, given.significand))?;
    Ok(Tensor::<2>::from_data(TensorData::new(given.values, [rows, first]), &device.clone().autodiff()).require_grad())
}

/// Refuses finite embeddings that are not of unit length when the loss's distance assumes they
/// are (rdml's own models normalise their output; a caller's model may not). Rows normalised in a
/// narrower type are off by its rounding: the allowance is 1e-3, or four units in the last place
/// of a type of `significand` bits where that is more (bfloat16: 0.016; float16: 0.002).
fn check_unit_length(values: &[f32], dim: usize, loss: &LossConfig, (what, significand): (&str, u32)) -> Result<()> {
    if !loss.unit().needs_normalized() || dim == 0 {
        return Ok(());
    }
    let allowed = (4.0 * 2f32.powi(-(significand.min(24) as i32))).max(1e-3);
    for (i, row) in values.chunks(dim).enumerate() {
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        let unit = (norm - 1.0).abs() <= allowed;
        crate::ensure_input!(
            unit,
            "{what}: row {i} has length {norm}; loss {} with distance {:?} takes embeddings of unit length \
             (L2-normalise each row, or give the loss distance = \"euclidean\")",
            loss.name(),
            loss.distance()
        );
    }
    Ok(())
}

/// The loss's parameters for one evaluation: its β as the caller holds it (`beta`), or its
/// initial value, as a leaf on `device`'s autodiff twin.
pub fn params(loss: &LossConfig, beta: Option<f32>, device: &Device) -> Result<LossParams> {
    let owned = loss.unit().trainable_beta();
    crate::ensure_input!(
        beta.is_none() || owned.is_some(),
        "beta: loss {} has no trainable β",
        loss.name()
    );
    let beta = owned.map(|(b0, _)| {
        let v = beta.unwrap_or(b0);
        Param::from_tensor(Tensor::<1>::from_floats([v], &device.clone().autodiff()).require_grad())
    });
    Ok(LossParams { beta })
}

/// A loss's value and its gradients.
pub struct Pulled {
    pub value: f32,
    /// One per leaf, row-major, zero where the loss does not reach it.
    pub grads: Vec<Vec<f32>>,
    pub beta_grad: Option<f32>,
}

/// `loss`'s value (a number, or the caller's error) and its gradients with respect to `leaves`
/// and the β of `params`.
pub fn pull(loss: Tensor<1>, leaves: &[Tensor<2>], params: &LossParams) -> Result<Pulled> {
    let value = crate::host::scalar(&loss.clone().detach().without_autodiff())?;
    crate::ensure_input!(
        value.is_finite(),
        "the loss of these embeddings is {value}; no gradient is returned"
    );
    let g = loss.backward();
    let mut grads = Vec::with_capacity(leaves.len());
    for leaf in leaves {
        let [rows, d] = leaf.dims();
        grads.push(match leaf.grad(&g) {
            Some(t) => crate::host::read(&t.without_autodiff())?,
            None => vec![0.0; rows * d],
        });
    }
    let beta_grad = match &params.beta {
        Some(b) => Some(match b.val().grad(&g) {
            Some(t) => crate::host::scalar(&t.without_autodiff())?,
            None => 0.0,
        }),
        None => None,
    };
    crate::ensure_input!(
        grads.iter().flatten().all(|v| v.is_finite()),
        "the loss's gradient with respect to these embeddings holds NaN or infinite values; none is returned"
    );
    Ok(Pulled {
        value,
        grads,
        beta_grad,
    })
}
