"""Vision models of the zoo, from torchvision with random weights: ResNet, MobileNet, EfficientNet, ViT.

    autokernel verify benchmarks/zoo/vision.py --model-arg arch=resnet18 [--model-arg size=tiny] --starters

size "full" is the architecture as torchvision builds it, at 224x224; "tiny" is the same architecture on a
32x32 image (a ViT of two small layers), for the CPU tests. Needs torchvision.
"""

import torch

ARCHS = ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "vit")
IMAGE = {"full": 224, "tiny": 32}


def get_model(arch: str = "resnet18", size: str = "full", batch: int = 1):
    import torchvision

    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    if arch == "vit":
        if size == "tiny":
            return torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                        hidden_dim=32, mlp_dim=64, num_classes=10).eval()
        return torchvision.models.vit_b_16(weights=None).eval()
    return getattr(torchvision.models, arch)(weights=None, num_classes=1000 if size == "full" else 10).eval()


def get_inputs(arch: str = "resnet18", size: str = "full", batch: int = 1):
    torch.manual_seed(0)
    return [torch.randn(batch, 3, IMAGE[size], IMAGE[size])]
