#include "kernels/cpu/gdn.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/dot.h"
#include "kernels/cpu/thread_pool.h"

namespace ds::cpu {
namespace {

// 1/sqrt(dk) rounded once from double, as the references scale q (f32 tensor times a Python float).
float q_scale(size_t dk) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
}

// Pointers to token t's vectors of value head n.
struct HeadView {
  const GdnShape& s;
  const float *q, *k, *v, *g, *beta;
  float* out;
  size_t n;                                      // value head
  size_t kh() const { return n % s.n_k_heads; }  // tiled V -> K head mapping
  const float* q_at(size_t t) const { return q + t * s.qk_token_stride + kh() * s.dk; }
  const float* k_at(size_t t) const { return k + t * s.qk_token_stride + kh() * s.dk; }
  const float* v_at(size_t t) const { return v + t * s.v_token_stride + n * s.dv; }
  float g_at(size_t t) const { return g[t * s.n_v_heads + n]; }
  float beta_at(size_t t) const { return beta[t * s.n_v_heads + n]; }
  float* out_at(size_t t) const { return out + (t * s.n_v_heads + n) * s.dv; }
};

// ---- token by token (spec §5.4) ---------------------------------------------------------------

// S: [dk][dv] of one value head, updated over all tokens.
void recurrent_head(const HeadView& hv, float* S) {
  const size_t dk = hv.s.dk, dv = hv.s.dv;
  const float scale = q_scale(dk);
  std::vector<float> m(dv), delta(dv), qs(dk);
  for (size_t t = 0; t < hv.s.n_tokens; ++t) {
    const float* q = hv.q_at(t);
    const float* k = hv.k_at(t);
    const float* v = hv.v_at(t);
    const float alpha = std::exp(hv.g_at(t));
    const float beta = hv.beta_at(t);
    // 1. decay: S <- alpha S
    for (size_t e = 0; e < dk * dv; ++e) S[e] *= alpha;
    // 2. read: m = S^T k
    std::fill(m.begin(), m.end(), 0.0f);
    for (size_t i = 0; i < dk; ++i)
      for (size_t j = 0; j < dv; ++j) m[j] += S[i * dv + j] * k[i];
    // 3. delta = beta (v - m)
    for (size_t j = 0; j < dv; ++j) delta[j] = (v[j] - m[j]) * beta;
    // 4. write: S += k delta^T
    for (size_t i = 0; i < dk; ++i)
      for (size_t j = 0; j < dv; ++j) S[i * dv + j] += k[i] * delta[j];
    // 5. output with the updated state: o = S^T (q / sqrt(dk))
    for (size_t i = 0; i < dk; ++i) qs[i] = q[i] * scale;
    float* o = hv.out_at(t);
    std::fill(o, o + dv, 0.0f);
    for (size_t i = 0; i < dk; ++i)
      for (size_t j = 0; j < dv; ++j) o[j] += S[i * dv + j] * qs[i];
  }
}

// ---- chunked UT/WY form (spec §5.6) -----------------------------------------------------------

// Scratch for one chunk of up to C tokens of one value head. Matrices are row-major.
struct ChunkScratch {
  std::vector<float> q, k, v;    // [C][dk] scaled q, [C][dk], [C][dv]
  std::vector<float> beta, gam;  // [C] write strength, cumulative log-decay
  std::vector<float> M;          // [C][C] exp(gam_r - gam_i) for i <= r, else 0
  std::vector<float> QK;         // [C][C] q_r . k_i (only i <= r used)
  std::vector<float> A;          // [C][C] strictly lower beta_r (k_r . k_i) M_ri
  std::vector<float> T;          // [C][C] (I + A)^-1, unit lower triangular
  std::vector<float> U;          // [C][dv] corrected writes (W - Kd S)
  std::vector<float> Kd;         // [C][dk] T diag(beta * Gamma) K
  std::vector<float> row;        // [max(dk, dv)]
  ChunkScratch(size_t C, size_t dk, size_t dv)
      : q(C * dk),
        k(C * dk),
        v(C * dv),
        beta(C),
        gam(C),
        M(C * C),
        QK(C * C),
        A(C * C),
        T(C * C),
        U(C * dv),
        Kd(C * dk),
        row(std::max(dk, dv)) {}
};

// Processes tokens [t0, t0 + L) of one value head; S: [dk][dv] updated in place.
void chunk_step(const HeadView& hv, size_t t0, size_t L, size_t C, ChunkScratch& w, float* S) {
  const size_t dk = hv.s.dk, dv = hv.s.dv;
  const float scale = q_scale(dk);

  // Gather the chunk: q_hat = q / sqrt(dk), k, v, beta, gam = cumsum(g).
  float gsum = 0.0f;
  for (size_t r = 0; r < L; ++r) {
    const float* q = hv.q_at(t0 + r);
    const float* k = hv.k_at(t0 + r);
    const float* v = hv.v_at(t0 + r);
    for (size_t i = 0; i < dk; ++i) w.q[r * dk + i] = q[i] * scale;
    std::copy(k, k + dk, w.k.begin() + static_cast<std::ptrdiff_t>(r * dk));
    std::copy(v, v + dv, w.v.begin() + static_cast<std::ptrdiff_t>(r * dv));
    w.beta[r] = hv.beta_at(t0 + r);
    gsum += hv.g_at(t0 + r);
    w.gam[r] = gsum;
  }

  // Pairwise decay (mask before exp: every exponent is <= 0), q.k, and the strictly-lower A.
  for (size_t r = 0; r < L; ++r) {
    for (size_t i = 0; i <= r; ++i) {
      const float m = std::exp(w.gam[r] - w.gam[i]);
      w.M[r * C + i] = m;
      w.QK[r * C + i] = detail::dot(&w.q[r * dk], &w.k[i * dk], dk);
      w.A[r * C + i] = i < r ? w.beta[r] * detail::dot(&w.k[r * dk], &w.k[i * dk], dk) * m : 0.0f;
    }
  }

  // T = (I + A)^-1 by forward substitution: row r of T = e_r - sum_{i<r} A_ri T_i.
  for (size_t r = 0; r < L; ++r) {
    float* Tr = &w.T[r * C];
    std::fill(Tr, Tr + L, 0.0f);
    Tr[r] = 1.0f;
    for (size_t i = 0; i < r; ++i) {
      const float a = w.A[r * C + i];
      const float* Ti = &w.T[i * C];
      for (size_t c = 0; c <= i; ++c) Tr[c] -= a * Ti[c];
    }
  }

  // W = T diag(beta) V and Kd = T diag(beta * Gamma) K; then U = W - Kd S.
  for (size_t r = 0; r < L; ++r) {
    float* Ur = &w.U[r * dv];
    float* Kdr = &w.Kd[r * dk];
    std::fill(Ur, Ur + dv, 0.0f);
    std::fill(Kdr, Kdr + dk, 0.0f);
    for (size_t c = 0; c <= r; ++c) {
      const float tb = w.T[r * C + c] * w.beta[c];
      const float tbg = tb * std::exp(w.gam[c]);
      const float* vc = &w.v[c * dv];
      const float* kc = &w.k[c * dk];
      for (size_t j = 0; j < dv; ++j) Ur[j] += tb * vc[j];
      for (size_t i = 0; i < dk; ++i) Kdr[i] += tbg * kc[i];
    }
    for (size_t i = 0; i < dk; ++i) {
      const float kd = Kdr[i];
      const float* Si = &S[i * dv];
      for (size_t j = 0; j < dv; ++j) Ur[j] -= kd * Si[j];
    }
  }

  // O = diag(Gamma) Q_hat S + (M . Q_hat K^T) U   (M includes the diagonal).
  for (size_t r = 0; r < L; ++r) {
    float* o = hv.out_at(t0 + r);
    float* inter = w.row.data();
    std::fill(inter, inter + dv, 0.0f);
    const float* qr = &w.q[r * dk];
    for (size_t i = 0; i < dk; ++i) {
      const float qi = qr[i];
      const float* Si = &S[i * dv];
      for (size_t j = 0; j < dv; ++j) inter[j] += qi * Si[j];
    }
    const float Gr = std::exp(w.gam[r]);
    for (size_t j = 0; j < dv; ++j) o[j] = Gr * inter[j];
    for (size_t c = 0; c <= r; ++c) {
      const float a = w.M[r * C + c] * w.QK[r * C + c];
      const float* Uc = &w.U[c * dv];
      for (size_t j = 0; j < dv; ++j) o[j] += a * Uc[j];
    }
  }

  // S_new = Gamma_L S + (diag(exp(gam_L - gam)) K)^T U.
  const float gL = w.gam[L - 1];
  const float GL = std::exp(gL);
  for (size_t e = 0; e < dk * dv; ++e) S[e] *= GL;
  for (size_t r = 0; r < L; ++r) {
    const float d = std::exp(gL - w.gam[r]);
    const float* kr = &w.k[r * dk];
    const float* Ur = &w.U[r * dv];
    for (size_t i = 0; i < dk; ++i) {
      const float coef = d * kr[i];
      float* Si = &S[i * dv];
      for (size_t j = 0; j < dv; ++j) Si[j] += coef * Ur[j];
    }
  }
}

void chunked_head(const HeadView& hv, size_t C, float* S) {
  ChunkScratch w(C, hv.s.dk, hv.s.dv);
  for (size_t t0 = 0; t0 < hv.s.n_tokens; t0 += C) chunk_step(hv, t0, std::min(C, hv.s.n_tokens - t0), C, w, S);
}

}  // namespace

void gdn_recurrent(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float* state, float* out, ThreadPool* pool) {
  if (pool == nullptr) pool = default_pool();
  pool->parallel_for(s.n_v_heads, 1, [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; ++n) {
      recurrent_head(HeadView{s, q, k, v, g, beta, out, n}, state + n * s.dk * s.dv);
    }
  });
}

void gdn_chunked(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                 float* state, float* out, size_t chunk, ThreadPool* pool) {
  if (pool == nullptr) pool = default_pool();
  const size_t C = std::max<size_t>(1, chunk);
  pool->parallel_for(s.n_v_heads, 1, [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; ++n) {
      chunked_head(HeadView{s, q, k, v, g, beta, out, n}, C, state + n * s.dk * s.dv);
    }
  });
}

void gdn_recurrent(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float* state, float* out) {
  gdn_recurrent(s, q, k, v, g, beta, state, out, nullptr);
}

void gdn_chunked(const GdnShape& s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                 float* state, float* out, size_t chunk) {
  gdn_chunked(s, q, k, v, g, beta, state, out, chunk, nullptr);
}

}  // namespace ds::cpu
