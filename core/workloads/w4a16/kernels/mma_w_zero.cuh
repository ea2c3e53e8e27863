/* Zero points of the weights-as-A kernel (mma_w.cu's {{zero}}, at a group's start): per column
 * of the lane's two in each tile, the magic number plus z. Slot: base (the magic's value).
 */
                const int grp = gb + (s0 + u) / 4;
#pragma unroll
                for (int c = 0; c < NC; ++c)
#pragma unroll
                    for (int h = 0; h < 2; ++h) { const int col = min(n0 + 16 * c + 8 * h + g, N - 1);
                        const float z = (float)zp[(long long)grp * N + col]; c2[c][h] = pack2({{base}}.f + z, {{base}}.f + z); }
