/* A group's float32 partial sums times its scales, at the group's end or the chunk's (mma.cu's
 * {{flush}}, with the scale on the sums). Uses NT, KS, B.
 */
            if ((u & 3) == 3 || u == B - 1 || ks == KS - 1) {
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const int col = n0 + 8 * j + 2 * t;
                    const float s_lo = col < N ? to_f(sc[(long long)grp * N + col]) : 0.f;
                    const float s_hi = col + 1 < N ? to_f(sc[(long long)grp * N + col + 1]) : 0.f;
                    acc[j][0] += part[j][0] * s_lo; acc[j][1] += part[j][1] * s_hi;
                    acc[j][2] += part[j][2] * s_lo; acc[j][3] += part[j][3] * s_hi;
                    part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.f;
                }
            }
