"""Write site1.csv and site2.csv: two sites' exports of a synthetic study, as real exports look —
a record id, a text column (the clinic) and about 1 % missing responses (NA). The variables follow
age → dose → response with age → response too. Run from this folder: ``python make.py``."""

import numpy as np

rng = np.random.default_rng(7)
for k, n in enumerate((400, 350), start=1):
    age = rng.normal(size=n)
    dose = 0.9 * age + rng.normal(size=n)
    response = -0.8 * dose + 0.5 * age + rng.normal(size=n)
    ids = np.arange(1, n + 1) + 1000 * k
    with open(f"site{k}.csv", "w") as f:
        f.write("record,age,dose,response,clinic\n")
        for i in range(n):
            resp = "NA" if rng.random() < 0.01 else f"{response[i]:.4f}"
            f.write(f"{ids[i]},{age[i]:.4f},{dose[i]:.4f},{resp},clinic-{k}\n")
