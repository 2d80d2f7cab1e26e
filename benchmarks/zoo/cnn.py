"""Convolutional nets and MLPs of the zoo in plain PyTorch, as KernelBench's levels 1-3 write them.

    autokernel verify benchmarks/zoo/cnn.py --model-arg arch=resnet18 [--model-arg size=tiny] --starters

arch: "conv_bn_relu" (a 2D convolution, batch norm, ReLU), "depthwise" (a depthwise 2D convolution), "maxpool" (2D
max pooling), "resnet18" (ResNet-18's basic blocks, downsampling and pooling, KernelBench level 3's), and
"deep_narrow_mlp" (eight Linear + ReLU in a row, KernelBench level 3's DeepNarrowMLP). size "tiny" is for the CPU
tests: few channels and small images.
"""

import torch
from torch import nn

ARCHS = ("conv_bn_relu", "depthwise", "maxpool", "resnet18", "deep_narrow_mlp")
SIZES = {"full": dict(batch=8, channels=64, image=112, width=64, mlp_in=1000, mlp_hidden=50, mlp_batch=1),
         "tiny": dict(batch=1, channels=4, image=16, width=4, mlp_in=32, mlp_hidden=8, mlp_batch=1)}


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    def __init__(self, width: int, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for i, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
            blocks += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def get_model(arch: str = "resnet18", size: str = "full"):
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    s = SIZES[size]
    c = s["channels"]
    if arch == "conv_bn_relu":
        model = nn.Sequential(nn.Conv2d(c, 2 * c, 3, padding=1), nn.BatchNorm2d(2 * c), nn.ReLU())
    elif arch == "depthwise":
        model = nn.Conv2d(c, c, 3, padding=1, groups=c)
    elif arch == "maxpool":
        model = nn.MaxPool2d(3, stride=2, padding=1)
    elif arch == "resnet18":
        model = ResNet18(s["width"], 1000 if size == "full" else 10)
    else:
        layers, width = [], s["mlp_in"]
        for _ in range(8):
            layers += [nn.Linear(width, s["mlp_hidden"]), nn.ReLU()]
            width = s["mlp_hidden"]
        model = nn.Sequential(*layers, nn.Linear(width, 10))
    return model.eval()


def get_inputs(arch: str = "resnet18", size: str = "full"):
    torch.manual_seed(0)
    s = SIZES[size]
    if arch == "deep_narrow_mlp":
        return [torch.randn(s["mlp_batch"], s["mlp_in"])]
    channels = 3 if arch == "resnet18" else s["channels"]
    image = 224 if arch == "resnet18" and size == "full" else s["image"]
    return [torch.randn(s["batch"] if arch != "resnet18" else 1, channels, image, image)]
