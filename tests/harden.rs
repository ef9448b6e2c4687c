//! A defense and a loss in a caller's own loop (`harden`), the caller here an rdml network
//! behind the host-array interface a binding implements: the session's inner step, the caller's
//! training-mode forwards, the session's outer gradient carried on through the caller's network
//! give rdml's trainer's loss and parameter gradients on the same weights, batch and stream.

mod common;
use common::host_net::boxed;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Device, Tensor, TensorData};
use rdml::config::Experiment;
use rdml::defense::{DefenseConfig, DefenseState};
use rdml::harden::leaves::Given;
use rdml::harden::{DefenseRequest, DefenseSession, Images, LossRequest, LossSession};
use rdml::loss::{LossConfig, LossParams};
use rdml::model::EmbeddingNet;

/// Every parameter's gradient, in visiting order.
struct Grads<'a>(&'a burn::tensor::Gradients, Vec<Vec<f32>>);

impl ModuleVisitor for Grads<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        let t = p.val();
        let n = t.dims().iter().product::<usize>();
        self.1
            .push(rdml::host::read(&t.grad(self.0).unwrap().reshape([1, n])).unwrap());
    }
}

fn grads(net: &EmbeddingNet, g: &burn::tensor::Gradients) -> Vec<Vec<f32>> {
    let mut v = Grads(g, vec![]);
    net.visit(&mut v);
    v.1
}

/// A seeded C2F2 (trainable), and one SPC-2 batch of 8 pairs.
fn setup() -> (Experiment, EmbeddingNet, Vec<f32>, Vec<u32>) {
    let exp = Experiment::load("quickstart", &["model.embedding_dim=32".into()]).unwrap();
    let splits = exp.data.load(0).unwrap();
    let dev = Device::default().autodiff();
    let net = rdml::seeded(&dev, 3, || EmbeddingNet::new(&exp.model, [1, 28, 28], &dev).unwrap());
    let labels = &splits.train.labels;
    let mut idx = vec![];
    for c in 0..8u32 {
        idx.extend((0..labels.len()).filter(|&i| labels[i] == c).take(2));
    }
    let b = rdml::data::loader::load_batch(&splits.train, &idx, None).unwrap();
    (exp, net, b.images, b.labels)
}

fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let scale = y.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
            x.iter().zip(y).fold(0f32, |m, (p, q)| m.max((p - q).abs())) / scale
        })
        .fold(0.0, f32::max)
}

#[test]
fn a_defense_step_through_the_session_is_the_trainers_step() {
    let (exp, net, images, labels) = setup();
    let dev = Device::default().autodiff();
    let shape = [labels.len(), 1, 28, 28];
    let x = Tensor::<4>::from_data(TensorData::new(images.clone(), shape), &dev);
    let items: Vec<usize> = (0..labels.len()).collect();
    let defenses = [
        "{kind=\"act\",eps=0.1,step=0.02,steps=4}",
        "{kind=\"hm\",eps=0.1,step=0.02,steps=4,source=\"softhard\",destination=\"lga\",ics=0.5}",
        "{kind=\"est\",eps=0.1,step=0.02,steps=4}",
        "{kind=\"mdprop\",eps=0.05,step=0.05,steps=1,distributions=[{kind=\"stax\"},{kind=\"mtax\",targets=2}]}",
        "{kind=\"positive-perturbation\",eps=0.1,step=0.05,steps=2,rate=1.0,regularizer=0.5}",
    ];
    for d in defenses {
        let defense: DefenseConfig = toml::from_str::<toml::Table>(&format!("v = {d}")).unwrap()["v"]
            .clone()
            .try_into()
            .unwrap();
        // rdml's trainer.
        let params = LossParams::new(&exp.loss, &dev);
        let memory = defense.unit().memory();
        let mut rng = rdml::data::sampler::epoch_rng(9, 0, 2);
        let out = rdml::train::defended::defended_loss(
            &defense,
            &exp.loss,
            &net,
            &params,
            x.clone(),
            (&labels, &items),
            &DefenseState::default(),
            memory.as_ref(),
            &mut rng,
        )
        .unwrap();
        let want = rdml::host::scalar(&out.loss.clone().without_autodiff()).unwrap();
        let want_grads = grads(&net, &out.loss.backward());
        // The session, the caller's network behind the host arrays.
        let request = DefenseRequest {
            defense: defense.clone(),
            loss: exp.loss.clone(),
            seed: 9,
        };
        let mut session = DefenseSession::open(request, &Device::default()).unwrap();
        let sets = session.bn_sets();
        let models = (0..sets).map(|_| boxed(&net, 0)).collect();
        let batch = Images {
            images: images.clone(),
            shape,
            labels: labels.iter().map(|&l| i64::from(l)).collect(),
        };
        let f = session.inner(batch, None, None, models).unwrap();
        let emb: Vec<Tensor<2>> = f
            .images
            .iter()
            .map(|(v, s)| net.forward(Tensor::<4>::from_data(TensorData::new(v.clone(), *s), &dev)))
            .collect();
        let given = emb
            .iter()
            .map(|e| Given::f32(rdml::host::read(&e.clone().without_autodiff()).unwrap(), e.dims()[0]))
            .collect();
        let step = session.outer(given, None).unwrap();
        let pulled = emb
            .iter()
            .zip(&step.grads)
            .map(|(e, g)| (e.clone() * Tensor::<2>::from_data(TensorData::new(g.clone(), e.dims()), &dev)).sum())
            .reduce(|a, b| a + b)
            .unwrap();
        let got_grads = grads(&net, &pulled.backward());
        assert!(
            (step.loss - want).abs() <= 1e-6 * want.abs() + 1e-7,
            "{d}: {} vs {want}",
            step.loss
        );
        let w = worst(&got_grads, &want_grads);
        assert!(w <= 1e-5, "{d}: gradients {w} apart");
        assert_eq!(step.steps_done, 1);
    }
}

#[test]
fn a_loss_through_the_session_is_the_trainers_loss() {
    let (_, net, images, labels) = setup();
    let dev = Device::default().autodiff();
    let x = Tensor::<4>::from_data(TensorData::new(images, [labels.len(), 1, 28, 28]), &dev);
    for table in [
        "{kind=\"triplet\",miner=\"semihard\"}",
        "{kind=\"margin\"}",
        "{kind=\"dro\",variant=\"kl\",gamma=0.1}",
        "{kind=\"dro\",variant=\"top-k\",k=16}",
        "{kind=\"multi-similarity\"}",
    ] {
        let loss: LossConfig = toml::from_str::<toml::Table>(&format!("v = {table}")).unwrap()["v"]
            .clone()
            .try_into()
            .unwrap();
        let params = LossParams::new(&loss, &dev);
        let mut rng = rdml::data::sampler::epoch_rng(5, 0, 2);
        let e = net.forward(x.clone());
        let want_t = rdml::loss::compute(&loss, e.clone(), &labels, &params, &mut rng)
            .unwrap()
            .loss;
        let want = rdml::host::scalar(&want_t.clone().without_autodiff()).unwrap();
        let g = want_t.backward();
        let want_beta = params
            .beta
            .as_ref()
            .map(|b| rdml::host::scalar(&b.val().grad(&g).unwrap()).unwrap());
        let want_grads = grads(&net, &g);
        let mut session = LossSession::open(LossRequest { loss, seed: 5 }, &Device::default()).unwrap();
        let e = net.forward(x.clone());
        let given = Given::f32(rdml::host::read(&e.clone().without_autodiff()).unwrap(), labels.len());
        let l: Vec<i64> = labels.iter().map(|&v| i64::from(v)).collect();
        let out = session.compute(given, &l, None, None).unwrap();
        let gt = Tensor::<2>::from_data(TensorData::new(out.grad.clone(), e.dims()), &dev);
        let got_grads = grads(&net, &(e * gt).sum().backward());
        assert!(
            (out.value - want).abs() <= 1e-6 * want.abs() + 1e-7,
            "{table}: {} vs {want}",
            out.value
        );
        assert!(worst(&got_grads, &want_grads) <= 1e-5, "{table}");
        assert_eq!(out.beta_grad.is_some(), want_beta.is_some(), "{table}");
        if let (Some(a), Some(b)) = (out.beta_grad, want_beta) {
            assert!((a - b).abs() <= 1e-5 * b.abs() + 1e-7, "{table}: β {a} vs {b}");
        }
    }
}
