"""Attack: a region kernel that reads an int64 input through its low byte (8 times less memory traffic).

The region (tests/attacks/regions/region_eb6fa8e746285369.json, found by autokernel's region finder in a
module that computes rotary tables in its forward, as LLaMA's rotary embedding does from position_ids)
reads position_ids, an int64 tensor that is no index of anything in the region. The judge gives such an
input the "integer" domain and draws it uniform in [0, 8) in every case (regions/inputs.py), so its low
byte is all of it. This kernel is Inductor's starter with one change: position_ids is loaded as uint8
through a pointer to its low byte. Every position from 256 on wraps (position 300 rotates as 44): a
model's position_ids run to its context length (4096 and more), so from the 257th token on every query
and key is rotated by the wrong angle. The judge must draw integer inputs over a range a model uses (up to
a context length, 2^15 or more, and negative where the dtype allows), or take the range from the values
the model passed when the region was captured. Judge it with AUTOKERNEL_REGION_DIRS=tests/attacks/regions.
"""

import os

import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import math as tl_math

if os.environ.get("TRITON_INTERPRET") == "1":     # Triton's interpreter cannot call CUDA's libdevice
    from autokernel.core.interpreter_libdevice import libdevice
else:
    from torch._inductor.runtime.triton_helpers import libdevice

KERNEL_TYPE = "region_eb6fa8e746285369"

# The kernels, in launch order:
#   k0: triton_poi_fused__to_copy_add_cat_cos_flip_mul_sin_unsqueeze_0
TUNABLES = {
    'k0_XBLOCK': 2048,
    'k0_num_warps': 4,
    'k0_num_stages': 1,
}
TUNABLE_CHOICES = {
    'k0_XBLOCK': [256, 512, 1024, 2048, 4096],
    'k0_num_warps': [1, 2, 4, 8, 16],
    'k0_num_stages': [1, 2, 3, 4],
}


@triton.jit
def triton_poi_fused__to_copy_add_cat_cos_flip_mul_sin_unsqueeze_0(in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 2048
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x2 = xindex
    x1 = xindex // 16
    x0 = (xindex % 16)
    tmp0 = tl.load(in_ptr0 + (x2), xmask)
    # the trick: the int64 position's low byte only (little-endian), an eighth of the bytes
    tmp1 = tl.load(in_ptr1.to(tl.pointer_type(tl.uint8)) + 8 * x1, xmask, eviction_policy='evict_last')
    tmp3 = tl.load(in_ptr2 + ((x2 % 8)), xmask, eviction_policy='evict_last')
    tmp7 = tl.load(in_ptr0 + (15 + ((-1)*x0) + 16*x1), xmask, eviction_policy='evict_last')
    tmp2 = tmp1.to(tl.float32)
    tmp4 = tmp2 * tmp3
    tmp5 = tl_math.cos(tmp4)
    tmp6 = tmp0 * tmp5
    tmp8 = tl_math.sin(tmp4)
    tmp9 = tmp7 * tmp8
    tmp10 = tmp6 + tmp9
    tl.store(out_ptr0 + (x2), tmp10, xmask)


def kernel_fn(position_ids, inv_freq, x):
    device = position_ids.device
    buf0 = torch.empty_strided((2, 64, 16), (1024, 16, 1), dtype=torch.float32, device=device)
    # [unsqueeze_default, _to_copy_default, unsqueeze_default_1, unsqueeze_default_2, mul_tensor, cat_default, cos_default, mul_tensor_1, flip_default, sin_default, mul_tensor_2, add_tensor], Original ATen: [aten.unsqueeze, aten._to_copy, aten.mul, aten.cat, aten.cos, aten.flip, aten.sin, aten.add]
    triton_poi_fused__to_copy_add_cat_cos_flip_mul_sin_unsqueeze_0[(triton.cdiv(2048, TUNABLES['k0_XBLOCK']),)](x, position_ids, inv_freq, buf0, 2048, XBLOCK=TUNABLES['k0_XBLOCK'], num_warps=TUNABLES['k0_num_warps'], num_stages=TUNABLES['k0_num_stages'])
    return buf0
