"""The parallelism paper's seven evaluation models (Wang et al., TACO 2021) as bundled workloads."""
