"""A recommender of the zoo in plain PyTorch, as DLRM builds one: embedding bags, MLPs, pairwise dot products.

    autokernel verify benchmarks/zoo/recsys.py [--model-arg size=tiny] --starters

Each sparse feature is a bag of ids summed by nn.EmbeddingBag (ids and offsets are int64 inputs); the dense
features go through the bottom MLP; the dot products of every pair of the resulting vectors (a batched matmul,
then the upper triangle picked by index) and the dense vector feed the top MLP. Its checks on the CPU found a
Triton interpreter bug in Inductor's batched matmul template (autokernel/core/interpreter.py).
"""

import torch
from torch import nn

SIZES = {"full": dict(batch=2048, dense=13, dim=64, tables=8, rows=100_000, ids=20, hidden=512),
         "tiny": dict(batch=2, dense=8, dim=16, tables=3, rows=100, ids=3, hidden=16)}


class DLRM(nn.Module):
    def __init__(self, dense: int, dim: int, tables: int, rows: int, hidden: int):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        self.bottom = nn.Sequential(nn.Linear(dense, hidden), nn.ReLU(), nn.Linear(hidden, dim), nn.ReLU())
        pairs = (tables + 1) * tables // 2
        self.top = nn.Sequential(nn.Linear(dim + pairs, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.register_buffer("upper", torch.triu_indices(tables + 1, tables + 1, 1), persistent=False)

    def forward(self, dense, ids, offsets):
        x = self.bottom(dense)
        vectors = torch.stack([x] + [bag(ids[i], offsets) for i, bag in enumerate(self.bags)], dim=1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.upper[0], self.upper[1]]
        return torch.sigmoid(self.top(torch.cat([x, dots], dim=1)))


def get_model(size: str = "full"):
    s = SIZES[size]
    return DLRM(s["dense"], s["dim"], s["tables"], s["rows"], s["hidden"]).eval()


def get_inputs(size: str = "full"):
    s = SIZES[size]
    torch.manual_seed(0)
    ids = torch.randint(0, s["rows"], (s["tables"], s["batch"] * s["ids"]))
    offsets = torch.arange(0, s["batch"] * s["ids"], s["ids"])      # every bag holds `ids` ids
    return [torch.randn(s["batch"], s["dense"]), ids, offsets]
