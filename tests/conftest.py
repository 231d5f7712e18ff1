import warnings

import pytest
import torch

warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
