/* RoPE: one token's rotation, vector path or scalar twin ({{run}} of main_head_split.cuh and
 * main_tokens.cuh). Uses t, h_lo, h_hi and the kernel's arguments; VEC.
 */

            const T *cs = cache + (long long)positions[t] * 2 * H;
            T *qt = q + (long long)t * nq * 2 * H, *kt = k + (long long)t * nk * 2 * H;
            if (vec_ok) token_run<VEC>(cs, qt, kt, nq, h_lo, h_hi, H, scs);
            else token_run<1>(cs, qt, kt, nq, h_lo, h_hi, H, scs);
