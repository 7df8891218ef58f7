"""The Gaussian scores of the two searches as they were before they were merged into
:mod:`bnsl_cli.solvers.gaussian_score` (issue 31), copied verbatim from ``bnsl_cli/solvers/score_search.py``
(``polish_*``) and ``bnsl_cli/solvers/suffstats.py`` (``suffstats_*``) at commit 2052faa; only the names and
docstrings changed. The reference of ``tests/solvers/test_gaussian_score.py``: the merged code must give
the same bits."""

from __future__ import annotations

from typing import Optional

import numpy as np


def polish_family_rss(G: np.ndarray, j: int, parents) -> float:
    idx = sorted(parents)
    if not idx:
        r = float(G[j, j])
    else:
        A = G[np.ix_(idx, idx)]
        b = G[idx, j]
        try:
            r = float(G[j, j] - b @ np.linalg.solve(A, b))
        except np.linalg.LinAlgError:
            return np.inf
    if not np.isfinite(r):
        return np.inf
    return max(r, 1e-12 * max(abs(float(G[j, j])), 1e-300))


def polish_family_table(G: np.ndarray, j: int, S: np.ndarray):
    d = G.shape[0]
    gj = G[:, j]
    diag = np.diag(G)
    if S.size == 0:
        C, Cd, drop = gj.copy(), diag.copy(), np.zeros(0)
    else:
        A = G[np.ix_(S, S)]
        GS = G[S, :]
        missing = ~np.isfinite(GS)
        try:
            Ainv = np.linalg.inv(A)
        except np.linalg.LinAlgError:
            return np.inf, np.full(d, np.nan), np.full(d, np.nan), np.full(S.size, np.nan)
        K = Ainv @ np.where(missing, 0.0, GS)
        C = gj - np.where(missing, 0.0, GS).T @ K[:, j]
        Cd = diag - np.einsum("ki,ki->i", np.where(missing, 0.0, GS), K)
        bad = missing.any(axis=0)
        C[bad] = np.nan
        Cd[bad] = np.nan
        coef = K[:, j]
        drop = C[j] + coef**2 / np.diag(Ainv)
    floor = 1e-12 * max(abs(float(G[j, j])), 1e-300)
    R = max(float(C[j]), floor) if np.isfinite(C[j]) else np.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        add = np.maximum(R - C**2 / Cd, floor)
    add[~(Cd > 0)] = np.nan
    add[j] = np.nan
    if S.size:
        add[S] = np.nan
    return R, add, C, np.maximum(drop, floor)


def polish_ebic_penalty(n: int, d: int) -> float:
    return float(np.log(n) / 2.0 + np.log(max(d, 2)))


def polish_bic_of(G: np.ndarray, n: int, E: np.ndarray, score: str, penalty: Optional[float] = None) -> float:
    d = G.shape[0]
    R = np.array([polish_family_rss(G, j, np.flatnonzero(E[:, j])) for j in range(d)])
    k = float(E.sum())
    pen = np.log(n) / 2.0 if penalty is None else float(penalty)
    if score == "equal":
        return n * d / 2.0 * np.log(R.sum() / d) + pen * k + np.log(n) / 2.0
    return n / 2.0 * np.log(R).sum() + pen * k + np.log(n) / 2.0 * d


def polish_least_squares_weights(G: np.ndarray, E: np.ndarray) -> np.ndarray:
    d = G.shape[0]
    W = np.zeros((d, d))
    for j in range(d):
        S = np.flatnonzero(E[:, j])
        if S.size:
            try:
                W[S, j] = np.linalg.solve(G[np.ix_(S, S)], G[S, j])
            except np.linalg.LinAlgError:
                W[S, j] = np.linalg.lstsq(G[np.ix_(S, S)], G[S, j], rcond=None)[0]
    return W


def suffstats_edge_threshold(n: float, d: int) -> float:
    return float(np.log(max(n, 2.0)) + 2.0 * np.log(max(d, 2)))


def suffstats_family_statistics(G: np.ndarray, j: int, S: np.ndarray, n: float, tau2, H: Optional[np.ndarray] = None):
    d = G.shape[0]
    diag = np.diag(G)
    if H is None:
        H = np.eye(d)
    Hs = H[None] if H.ndim == 2 else H
    t2s = np.atleast_1d(np.asarray(tau2, dtype=float))
    if t2s.size != Hs.shape[0]:
        raise ValueError("one noise variance per noise metric")
    if S.size:
        A = G[np.ix_(S, S)]
        try:
            Ainv = np.linalg.inv(A)
        except np.linalg.LinAlgError:
            Ainv = np.linalg.pinv(A)
        GS = G[S, :]
        K = Ainv @ GS  # column i: coefficients β_i of i on S
        C = G[:, j] - GS.T @ K[:, j]
        Cd = diag - np.einsum("ki,ki->i", GS, K)
        bj = K[:, j]
    else:
        C, Cd = G[:, j].copy(), diag.copy()
    floor = 1e-12 * max(abs(float(G[j, j])), 1e-300)
    R = max(float(C[j]), floor)
    noise_add = np.zeros(d)
    noise_keep = np.zeros(S.size)
    for t2m, Hm in zip(t2s, Hs):
        if t2m == 0.0:
            continue
        hd = np.diag(Hm)
        if S.size:
            HS = Hm[S, :]
            HSS = Hm[np.ix_(S, S)]
            aHa = hd - 2.0 * np.einsum("ki,ki->i", HS, K) + np.einsum("ki,ki->i", K, HSS @ K)
            bHb = float(aHa[j])
            aHb = Hm[:, j] - HS.T @ bj - K.T @ Hm[S, j] + K.T @ (HSS @ bj)
            # keeping parent S_k: b_k = rowₖ(A⁻¹)·(G_Sj − G_SS β_j) to first order, x = rowₖ(A⁻¹) on S
            xHx = np.einsum("kl,lm,km->k", Ainv, HSS, Ainv)
            xHb = Ainv @ (Hm[S, j] - HSS @ bj)
            noise_keep += t2m * (xHx * max(bHb, 0.0) + xHb**2)
        else:
            aHa, bHb, aHb = hd.copy(), float(hd[j]), Hm[:, j].copy()
        noise_add += t2m * (np.maximum(aHa, 0.0) * max(bHb, 0.0) + aHb**2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        add = np.maximum(R - C**2 / Cd, floor)
        t2 = C**2 / (Cd * add / n + noise_add)
    bad = ~(Cd > floor)
    add[bad] = np.nan
    t2[bad] = 0.0
    add[j] = np.nan
    t2[j] = 0.0
    if S.size:
        add[S] = np.nan
        t2[S] = 0.0
        vk = R * np.diag(Ainv) / n + noise_keep
        with np.errstate(divide="ignore", invalid="ignore"):
            t2_par = np.where(vk > 0, bj**2 / vk, 0.0)
    else:
        t2_par = np.zeros(0)
    return R, add, np.nan_to_num(t2, nan=0.0, posinf=0.0), t2_par


def suffstats_dropped_residuals(G: np.ndarray, j: int, S: np.ndarray, R: float) -> np.ndarray:
    if not S.size:
        return np.zeros(0)
    floor = 1e-12 * max(abs(float(G[j, j])), 1e-300)
    try:
        Ainv = np.linalg.inv(G[np.ix_(S, S)])
    except np.linalg.LinAlgError:
        Ainv = None
    dg = None if Ainv is None else np.diag(Ainv)
    if dg is None or not np.all(dg > 0) or not np.all(np.isfinite(Ainv)):
        return np.array([suffstats_family_statistics(G, j, np.delete(S, k), n=1.0, tau2=0.0)[0] for k in range(S.size)])
    b = Ainv @ G[S, j]
    C = float(G[j, j]) - float(G[S, j] @ b)
    return np.maximum(C + b**2 / dg, floor)


def suffstats_least_squares(G: np.ndarray, E: np.ndarray) -> np.ndarray:
    d = G.shape[0]
    W = np.zeros((d, d))
    for j in range(d):
        S = np.flatnonzero(E[:, j])
        if S.size:
            W[S, j] = np.linalg.lstsq(G[np.ix_(S, S)], G[S, j], rcond=None)[0]
    return W


def suffstats_bic(G: np.ndarray, n: float, E: np.ndarray, score: str) -> float:
    d = G.shape[0]
    R = np.array([max(suffstats_family_statistics(G, j, np.flatnonzero(E[:, j]), n, 0.0)[0], 1e-300) for j in range(d)])
    k = float(E.sum())
    pen = suffstats_edge_threshold(n, d) / 2.0
    if score == "equal":
        return n * d / 2.0 * np.log(R.sum() / d) + pen * k + np.log(n) / 2.0
    return n / 2.0 * np.log(R).sum() + pen * k + np.log(n) / 2.0 * d
