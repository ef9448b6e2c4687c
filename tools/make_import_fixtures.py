"""Builds the fixtures of `rdml import`'s PyTorch-equivalence test (tests/import.rs).

Each supported layout is built in PyTorch exactly as its tool builds it (torchvision and timm
ResNets with the classifier replaced by the embedding layer, robrank's Lightning modules,
pytorch-metric-learning's trunk and embedder, a model renamed for --key-map), saved as that tool
saves it, and its embeddings of fixed images recorded in evaluation mode. The weights are sparse
and quantised so the gzipped fixtures stay small (under 2 MB in all); the batch norms' running
statistics are those of the fixture images (one train-mode pass with momentum 1), so every
layer normalises real activations and the embeddings differ from image to image.

Needs torch, torchvision, timm, pytorch-lightning and safetensors (from PyPI; no downloads at
run time: no pretrained weights are used). Run from the repository root:
    python tools/make_import_fixtures.py
It rewrites tests/fixtures/import/ (the files and manifest.json).
"""
import gzip, json, os, shutil, tempfile
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = "tests/fixtures/import"
torch.manual_seed(0)
np.random.seed(0)


def images(n, c, side):
    """Smooth images in [0, 1] quantised to pixel levels, as rdml reads them."""
    x = torch.rand(n, c, side // 4, side // 4)
    x = F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False)
    return (x * 255).round().clamp(0, 255) / 255


def sparsify(model, density=0.002):
    """Keeps a few weights per output unit, quantised to 1/8 steps of a He-scaled magnitude."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                keep = max(int(p.numel() * density), 2 * p.shape[0])
                flat = torch.zeros(p.numel())
                idx = torch.randperm(p.numel(), generator=g)[:keep]
                scale = (2.0 / (fan_in * keep / p.numel())) ** 0.5
                steps = torch.randint(-8, 9, (keep,), generator=g).float() / 8
                flat[idx] = steps * scale
                p.copy_(flat.view_as(p))
            elif name.endswith("weight"):  # batch-norm scale
                p.copy_(1 + torch.randint(-2, 3, p.shape, generator=g).float() / 8)
            else:  # biases
                p.copy_(torch.randint(-2, 3, p.shape, generator=g).float() / 16)


def calibrate(model, x, prepare):
    """Running statistics of the fixture images, rounded so they compress."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.momentum = 1.0
    model.train()
    with torch.no_grad():
        model(prepare(x))
        for m in bns:
            m.running_mean.copy_((m.running_mean * 64).round() / 64)
            m.running_var.copy_(2 ** ((m.running_var.clamp_min(1e-4).log2() * 4).round() / 4))
    model.eval()


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def normalise(stats):
    if stats is None:
        return lambda x: x
    m, s = (torch.tensor(v).view(1, -1, 1, 1) for v in stats)
    return lambda x: (x - m) / s


def embed(forward, x, prepare, l2):
    with torch.no_grad():
        e = forward(prepare(x))
    return F.normalize(e, dim=1) if l2 else e


def c2f2(dim):
    """robrank's rc2f2 backbone (robrank/models/template_rank.py), a Sequential."""
    return nn.Sequential(
        nn.Conv2d(1, 32, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(32, 64, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, dim))


def lightning_ckpt(backbone, path, x):
    """robrank's way: a LightningModule with `self.backbone`, saved by the Trainer after a step
    of SGD at learning rate 0 (the weights stay as built; the optimiser state is saved)."""
    import pytorch_lightning as pl

    class Model(pl.LightningModule):
        def __init__(self, dataset, loss):
            super().__init__()
            self.save_hyperparameters()
            self.backbone = backbone

        def forward(self, x):
            return self.backbone(x)

        def training_step(self, batch, _):
            return self(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    m = Model(dataset="fashion", loss="ptripletN")
    bn_state = {k: v.clone() for k, v in backbone.state_dict().items()}
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=len(x))
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.fit(m, data)
    backbone.load_state_dict(bn_state)  # the step's train-mode pass moved the running stats
    backbone.eval()
    trainer.save_checkpoint(path)
    return backbone


def main():
    import timm, torchvision
    from safetensors.torch import save_file

    tmp = tempfile.mkdtemp()
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    rgb, gray = images(4, 3, 64), images(4, 1, 28)
    for name, x in [("rgb64", rgb), ("gray28", gray)]:
        with gzip.GzipFile(f"{OUT}/{name}.u8.gz", "wb", 9, mtime=0) as f:
            f.write((x * 255).round().to(torch.uint8).numpy().tobytes())
    cases = []

    def record(name, files, arch, args, forward, x, stats, l2, img):
        e = embed(forward, x, normalise(stats), l2)
        spread = float(e.std(0).mean() / e.abs().mean())
        assert spread > 0.05, f"{name}: embeddings barely differ between images ({spread:.3f})"
        for f in files:
            with open(f"{tmp}/{f}", "rb") as src, gzip.GzipFile(f"{OUT}/{f}.gz", "wb", 9, mtime=0) as dst:
                dst.write(src.read())
        cases.append({"name": name, "files": files, "arch": arch, "args": args, "images": img,
                      "shape": list(x.shape), "embeddings": e.tolist(), "spread": round(spread, 3)})
        print(f"{name}: {e.shape[1]}-d, spread across images {spread:.3f}")

    # torchvision ResNet-18, fc replaced by the embedding layer, plain state_dict (.pth).
    m = torchvision.models.resnet18(weights=None)
    m.fc = nn.Linear(512, 64)
    sparsify(m); calibrate(m, rgb, normalise(IMAGENET))
    torch.save(m.state_dict(), f"{tmp}/torchvision-resnet18.pth")
    record("torchvision-resnet18", ["torchvision-resnet18.pth"], "resnet18", [], m, rgb, IMAGENET, True, "rgb64")

    # timm ResNet-18 with num_classes as the embedding, timm's 0.5/0.5 normalisation, safetensors,
    # used with raw (unnormalised) embeddings.
    m = timm.create_model("resnet18", pretrained=False, num_classes=32)
    half = ([0.5] * 3, [0.5] * 3)
    sparsify(m); calibrate(m, rgb, normalise(half))
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, f"{tmp}/timm-resnet18.safetensors")
    record("timm-resnet18", ["timm-resnet18.safetensors"], "resnet18",
           ["--input-norm", "0.5,0.5,0.5/0.5,0.5,0.5", "--l2-normalize", "false"], m, rgb, half, False, "rgb64")

    # robrank's rres18: torchvision ResNet-18 as `backbone`, fc → Linear(512, D); its forward
    # normalises with ImageNet's statistics; a Lightning .ckpt.
    m = torchvision.models.resnet18(weights=None)
    m.fc = nn.Linear(512, 64)
    sparsify(m); calibrate(m, rgb, normalise(IMAGENET))
    m = lightning_ckpt(m, f"{tmp}/robrank-rres18.ckpt", rgb)
    record("robrank-rres18", ["robrank-rres18.ckpt"], "resnet18", [], m, rgb, IMAGENET, True, "rgb64")

    # robrank's rc2f2 (raw pixels), a Lightning .ckpt.
    m = c2f2(64)
    sparsify(m)
    m = lightning_ckpt(m, f"{tmp}/robrank-rc2f2.ckpt", gray)
    record("robrank-rc2f2", ["robrank-rc2f2.ckpt"], "c2f2", [], m, gray, None, True, "gray28")

    # pytorch-metric-learning: trunk = ResNet-50 with fc = Identity, embedder = its examples'
    # MLP([2048, 64]) (`self.net = Sequential(Linear)`), saved as two files.
    trunk = torchvision.models.resnet50(weights=None)
    trunk.fc = nn.Identity()

    class MLP(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.net = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])])

        def forward(self, x):
            return self.net(x)

    embedder = MLP([2048, 64])
    sparsify(trunk); sparsify(embedder); calibrate(trunk, rgb, normalise(IMAGENET))
    torch.save(trunk.state_dict(), f"{tmp}/pml-trunk.pth")
    torch.save(embedder.state_dict(), f"{tmp}/pml-embedder.pth")
    record("pml-resnet50", ["pml-trunk.pth", "pml-embedder.pth"], "resnet50", [],
           lambda x: embedder(trunk(x)), rgb, IMAGENET, True, "rgb64")

    # The same pair as one dictionary {"trunk": ..., "embedder": ...}, in torch.save's legacy
    # (pre-1.6, non-zip) container.
    torch.save({"trunk": trunk.state_dict(), "embedder": embedder.state_dict()}, f"{tmp}/pml-pair.pt",
               _use_new_zipfile_serialization=False)
    record("pml-resnet50-one-file", ["pml-pair.pt"], "resnet50", [],
           lambda x: embedder(trunk(x)), rgb, IMAGENET, True, "rgb64")

    # A layout only --key-map reads: C2F2 as `encoder` (conv1, conv2, fc1) and `head`, in a
    # training script's {"model": state_dict, "epoch": ...} dictionary.
    class Renamed(nn.Module):
        def __init__(self):
            super().__init__()
            seq = c2f2(16)
            self.encoder = nn.Module()
            self.encoder.conv1, self.encoder.conv2, self.encoder.fc1 = seq[0], seq[3], seq[7]
            self.head = seq[9]
            self.seq = [seq]

        def forward(self, x):
            return self.seq[0](x)

    m = Renamed()
    sparsify(m)
    torch.save({"model": m.state_dict(), "epoch": 3}, f"{tmp}/renamed-c2f2.pth")
    record("renamed-c2f2", ["renamed-c2f2.pth"], "c2f2",
           ["--key-map", "encoder.=", "--key-map", "head.=fc2."], m, gray, None, True, "gray28")

    # A pickle that asks to run code: `torch.load(weights_only=False)` would call os.system.
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo this ran",))

    torch.save({"conv1.weight": torch.zeros(2, 2), "payload": Evil()}, f"{tmp}/evil.pth")
    with open(f"{tmp}/evil.pth", "rb") as src, gzip.GzipFile(f"{OUT}/evil.pth.gz", "wb", 9, mtime=0) as dst:
        dst.write(src.read())

    with open(f"{OUT}/manifest.json", "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f, indent=1)
    total = sum(os.path.getsize(f"{OUT}/{n}") for n in os.listdir(OUT))
    print(f"{OUT}: {total / 1e6:.2f} MB in all")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
