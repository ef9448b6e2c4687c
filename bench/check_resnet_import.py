"""Checks rdml's torchvision weight import: a torchvision ResNet (random weights and BN statistics,
seeded) is saved as .pth and as .safetensors, loaded by rdml (`bench/profile/resnet_features.rs`), and
the pooled features of the same batch are compared with PyTorch's in evaluation mode.
Needs torch, torchvision (pip install --no-deps torchvision) and safetensors.
Usage: python bench/check_resnet_import.py [resnet18|resnet50]
"""
import subprocess, sys, tempfile, os
import numpy as np
import torch, torchvision

arch = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
torch.manual_seed(0)
m = getattr(torchvision.models, arch)(weights=None).eval()
with torch.no_grad():
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5); mod.running_var.uniform_(0.5, 2.0)
            mod.weight.uniform_(0.5, 1.5); mod.bias.uniform_(-0.2, 0.2)
x = torch.randn(4, 3, 224, 224)
with torch.no_grad():
    h = m.maxpool(m.relu(m.bn1(m.conv1(x))))
    ref = torch.flatten(m.avgpool(m.layer4(m.layer3(m.layer2(m.layer1(h))))), 1)
d = tempfile.mkdtemp()
torch.save(m.state_dict(), f"{d}/w.pth")
files = [f"{d}/w.pth"]
try:
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, f"{d}/w.safetensors")
    files.append(f"{d}/w.safetensors")
except ImportError:
    print("safetensors not installed: checking .pth only")
x.numpy().astype(np.float32).tofile(f"{d}/x.f32")
subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "resnet_features"], check=True)
worst = 0.0
for w in files:
    subprocess.run(["./target/release/examples/resnet_features", arch, w, f"{d}/x.f32", "4", f"{d}/y.f32"], check=True)
    y = np.fromfile(f"{d}/y.f32", np.float32).reshape(ref.shape)
    err = float(np.abs(y - ref.numpy()).max() / np.abs(ref.numpy()).max())
    worst = max(worst, err)
    print(f"{arch} {os.path.basename(w)}: max |rdml − torch| / max |torch| = {err:.2e}")
sys.exit(0 if worst < 1e-4 else 1)
