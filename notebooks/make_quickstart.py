"""Writes notebooks/quickstart.ipynb (run it, then execute the notebook to store outputs)."""

from pathlib import Path

import nbformat as nbf

cells = [
    nbf.v4.new_markdown_cell("""# gpuaug quickstart

DataLoader workers only **decode**; one `gpuaug.Pipeline`, called on each batch in the training loop,
crops, resizes, rotates, flips and color-jitters **every sample with its own random parameters**.
This notebook runs on the CPU as well as on a GPU (`ga.select_device()` picks one)."""),
    nbf.v4.new_code_cell("""import tempfile
import torch
import matplotlib.pyplot as plt
import gpuaug as ga

plt.rcParams["figure.dpi"] = 60
device = ga.select_device()
photos = ga.sample_images()          # six real photos, uint8 (3, H, W), ragged sizes
print(device, [tuple(p.shape) for p in photos])

augment = ga.Pipeline(
    ga.RandomResizedCrop(224), ga.RandomHorizontalFlip(), ga.RandomRotation(15),
    ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD), seed=0)
augment"""),
    nbf.v4.new_code_cell("""def show(rows, titles=None, size=2.0):
    \"\"\"Plot rows of images (float (3, H, W) in [0, 1] or uint8).\"\"\"
    fig, axes = plt.subplots(len(rows), len(rows[0]), figsize=(size * len(rows[0]), size * len(rows)), squeeze=False)
    for r, row in enumerate(rows):
        for c, img in enumerate(row):
            img = img.float() / 255 if img.dtype == torch.uint8 else img.float()
            axes[r][c].imshow(img.clamp(0, 1).permute(1, 2, 0).cpu().numpy())
            axes[r][c].axis("off")
    if titles:
        for r, t in enumerate(titles):
            axes[r][0].set_title(t, loc="left", fontsize=9)
    plt.tight_layout()
    plt.show()

mean = torch.tensor(ga.IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
std = torch.tensor(ga.IMAGENET_STD, device=device).view(1, 3, 1, 1)
def unnormalize(x):
    return x.float() * std + mean"""),
    nbf.v4.new_markdown_cell("## Before and after: a ragged batch, one call"),
    nbf.v4.new_code_cell("""out = augment(photos)                 # a list of differently sized images is fine
print(out.shape, out.dtype, out.device)
show([photos, list(unnormalize(out))], ["decoded (what workers return)", "gpuaug"])"""),
    nbf.v4.new_markdown_cell("## Every sample its own draw\nOne photo repeated 8 times gives 8 different crops, angles, flips and colors; the drawn parameters come back with `return_params=True` and replay exactly."),
    nbf.v4.new_code_cell("""batch = photos[0][None].expand(8, -1, -1, -1)
out, params = augment(batch, return_params=True)
print("angles:", [round(a, 1) for a in params[2]["angle"].tolist()])
show([list(unnormalize(out))])
assert torch.equal(augment(batch, params=params), out)   # replay"""),
    nbf.v4.new_markdown_cell("## A clip gets one draw\nClips `(B, T, C, H, W)`: all T frames of a clip share the crop, rotation, flip and colors; clips differ."),
    nbf.v4.new_code_cell("""pan = torch.stack([photos[1][:, 20:320, 10 * t:10 * t + 400] for t in range(6)])   # (6, 3, 300, 400)
clips = torch.stack([pan, pan])                                                         # (2, 6, 3, 300, 400)
out = augment(clips)
show([list(unnormalize(out[0])), list(unnormalize(out[1]))], ["clip 1", "clip 2"], size=1.6)"""),
    nbf.v4.new_markdown_cell("## A training loop with DeviceLoader\nDecode-only workers (`ga.data.ImageFolder`), `ga.data.collate` (a batch of different sizes arrives as one buffer, `ga.PackedImages`), and `ga.DeviceLoader`, which moves each batch to the device and augments it there (on CUDA on a side stream, while the previous batch trains)."),
    nbf.v4.new_code_cell("""from torch.utils.data import DataLoader
from gpuaug.bench_loader import make_jpeg_folder

root = make_jpeg_folder(tempfile.mkdtemp() + "/jpegs", n=48)          # 48 JPEGs of mixed sizes, 2 classes
dataset = ga.data.ImageFolder(root, on_error="skip")
loader = ga.DeviceLoader(DataLoader(dataset, batch_size=16, shuffle=True, num_workers=2, collate_fn=ga.data.collate),
                         augment)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 7, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(8, 2)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(images.float()), labels)
        opt.zero_grad(); loss.backward(); opt.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
print(loader.stats)"""),
    nbf.v4.new_markdown_cell("## The benchmark\n`gpuaug bench` times the same photos and ops through torchvision per sample (what a worker does), kornia, torchvision on the batch (one draw per batch) and gpuaug. A short run here; the README has the full table."),
    nbf.v4.new_code_cell("""from gpuaug import bench
rows = bench.run(devices=[device], batch_sizes=[16], repeats=2, progress=False)
print(bench.format_table(rows))
bench.save_plot(rows, "bench.png")
plt.figure(figsize=(10, 5)); plt.imshow(plt.imread("bench.png")); plt.axis("off"); plt.show()"""),
]

nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbf.write(nb, Path(__file__).with_name("quickstart.ipynb"))
