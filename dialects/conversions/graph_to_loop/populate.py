"""Imports every op-family module so their lowerings register."""
from . import elementwise, fused, matmul, conv, pool, norm, reduce, shape  # noqa: F401
from . import attention  # noqa: F401,E402
from . import quantize  # noqa: F401,E402
from . import normalization  # noqa: F401,E402
from . import loss  # noqa: F401,E402
from . import scatter  # noqa: F401,E402
from . import einsum  # noqa: F401,E402
from . import gridsample  # noqa: F401,E402
from . import rotary  # noqa: F401,E402
from . import cumulative  # noqa: F401,E402
from . import resize  # noqa: F401,E402
from . import onehot  # noqa: F401,E402
from . import center_crop_pad  # noqa: F401,E402
from . import col2im  # noqa: F401,E402
from . import affine_grid  # noqa: F401,E402
from . import recurrent  # noqa: F401,E402
from . import conv_transpose  # noqa: F401,E402
from . import dft  # noqa: F401,E402
from . import quantized_linear  # noqa: F401,E402
from . import scan_loop  # noqa: F401,E402
from . import tensor_scatter  # noqa: F401,E402
from . import max_unpool  # noqa: F401,E402
from . import upsample  # noqa: F401,E402
from . import det  # noqa: F401,E402
