/* gpuaug's fused CPU color kernel: all of a pipeline's color ops for a batch of images, per
 * sample, in one pass over each image (plus one reduction pass per contrast step, whose mean
 * depends on the steps before it). Pixels go through the steps in tiles that stay in the L1
 * cache, so an image is read once and written once however many steps it takes.
 *
 * Each sample runs its own program: `steps` (op, factor) pairs, in order, then an optional
 * per-channel normalize. The formulas are torchvision's (torchvision.transforms.v2.functional):
 *   brightness f: clamp(f * x, 0, 1)
 *   contrast f:   clamp(f * x + (1 - f) * mean(gray(x)), 0, 1)
 *   saturation f: clamp(f * x + (1 - f) * gray(x), 0, 1)   (grayscale is saturation 0)
 *   hue f:        HSV hue shift by f turns, as gpuaug.functional.color.adjust_hue computes it
 *   normalize:    (x - mean) * inv_std
 * Saturation and hue do nothing to one channel, as in torchvision.
 *
 * Built and loaded by gpuaug/native/__init__.py, which checks every shape and dtype before the
 * call; this file trusts its arguments. Plain C99, no dependency beyond libm.
 */
#include <math.h>
#include <stdint.h>

enum { OP_NONE = 0, OP_BRIGHTNESS = 1, OP_CONTRAST = 2, OP_SATURATION = 3, OP_HUE = 4 };
enum { TILE = 512, MAX_STEPS = 64 };

/* ITU-R 601-2 luma, as torchvision's rgb_to_grayscale */
#define LUMA_R 0.2989f
#define LUMA_G 0.587f
#define LUMA_B 0.114f

static inline float clamp01(float v) {
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}

static void blend(float *restrict x, int n, float f, float offset) {
    for (int i = 0; i < n; i++) x[i] = clamp01(f * x[i] + offset);
}

static void saturation(float *restrict r, float *restrict g, float *restrict b, int n, float f) {
    const float k = 1.0f - f;
    for (int i = 0; i < n; i++) {
        const float gray = r[i] * LUMA_R + g[i] * LUMA_G + b[i] * LUMA_B;
        r[i] = clamp01(f * r[i] + k * gray);
        g[i] = clamp01(f * g[i] + k * gray);
        b[i] = clamp01(f * b[i] + k * gray);
    }
}

/* Hue in sixths of a turn from the max channel (ties pick r, then g, as torchvision), shifted
 * and wrapped to [0, 6); back to RGB by the closed form of HSV -> RGB:
 * R = min + c * clamp(|h - 3| - 1, 0, 1), G = max - c * clamp(|h - 2| - 1, 0, 1),
 * B = max - c * clamp(|h - 4| - 1, 0, 1), c = max - min. */
static void hue(float *restrict r, float *restrict g, float *restrict b, int n, float shift) {
    for (int i = 0; i < n; i++) {
        const float R = r[i], G = g[i], B = b[i];
        float v = R > G ? R : G;
        v = v > B ? v : B;
        float m = R < G ? R : G;
        m = m < B ? m : B;
        const float c = v - m;
        const float num = R == v ? G - B : (G == v ? B - R + 2.0f * c : R - G + 4.0f * c);
        float h = shift + num / (c > 1e-12f ? c : 1e-12f);
        h -= 6.0f * floorf(h * (1.0f / 6.0f));
        float wr = fabsf(h - 3.0f) - 1.0f, wg = fabsf(h - 2.0f) - 1.0f, wb = fabsf(h - 4.0f) - 1.0f;
        wr = wr < 0.0f ? 0.0f : (wr > 1.0f ? 1.0f : wr);
        wg = wg < 0.0f ? 0.0f : (wg > 1.0f ? 1.0f : wg);
        wb = wb < 0.0f ? 0.0f : (wb > 1.0f ? 1.0f : wb);
        r[i] = m + c * wr;
        g[i] = v - c * wg;
        b[i] = v - c * wb;
    }
}

static double gray_sum(const float *restrict r, const float *restrict g, const float *restrict b, int channels, int n) {
    float lanes[16] = {0};  /* a float sum per lane, added up in double per tile: vectorizes */
    int i = 0;
    if (channels == 3) {
        for (; i + 16 <= n; i += 16)
            for (int j = 0; j < 16; j++) lanes[j] += r[i + j] * LUMA_R + g[i + j] * LUMA_G + b[i + j] * LUMA_B;
    } else {
        for (; i + 16 <= n; i += 16)
            for (int j = 0; j < 16; j++) lanes[j] += r[i + j];
    }
    double total = 0.0;
    for (int j = 0; j < 16; j++) total += lanes[j];
    for (; i < n; i++) total += channels == 3 ? r[i] * LUMA_R + g[i] * LUMA_G + b[i] * LUMA_B : r[i];
    return total;
}

/* Runs steps [0, upto) over one image. With out == NULL, returns the sum of the result's gray
 * image (for a contrast step's mean); else normalizes (when mean != NULL) and writes out. */
static double run_image(const float *src, float *out, int channels, int64_t pixels, const int32_t *ops,
                        const float *factors, int upto, const float *contrast_mean, const float *mean,
                        const float *inv_std) {
    float buf[3][TILE];
    double total = 0.0;
    for (int64_t start = 0; start < pixels; start += TILE) {
        const int n = (int)(pixels - start < TILE ? pixels - start : TILE);
        for (int c = 0; c < channels; c++)
            for (int i = 0; i < n; i++) buf[c][i] = src[c * pixels + start + i];
        float *r = buf[0], *g = buf[1], *b = buf[2];
        for (int s = 0; s < upto; s++) {
            const float f = factors[s];
            switch (ops[s]) {
            case OP_BRIGHTNESS:
                for (int c = 0; c < channels; c++) blend(buf[c], n, f, 0.0f);
                break;
            case OP_CONTRAST:
                for (int c = 0; c < channels; c++) blend(buf[c], n, f, (1.0f - f) * contrast_mean[s]);
                break;
            case OP_SATURATION:
                if (channels == 3) saturation(r, g, b, n, f);
                break;
            case OP_HUE:
                if (channels == 3) hue(r, g, b, n, 6.0f * f);
                break;
            default:
                break;
            }
        }
        if (out == 0) {
            total += gray_sum(r, g, b, channels, n);
            continue;
        }
        for (int c = 0; c < channels; c++) {
            float *restrict dst = out + c * pixels + start;
            if (mean) {
                const float mu = mean[c], k = inv_std[c];
                for (int i = 0; i < n; i++) dst[i] = (buf[c][i] - mu) * k;
            } else {
                for (int i = 0; i < n; i++) dst[i] = buf[c][i];
            }
        }
    }
    return total;
}

/* src: (n, channels, pixels) float32, contiguous. Image i takes program row index[i] of
 * ops/factors ((rows, steps) int32 / float32) and is written to out + index[i] * channels * pixels.
 * mean/inv_std: (channels,) float32, or both NULL for no normalize. Returns 0, or -1 on arguments
 * this kernel does not take (nothing is written then). */
int gpuaug_color(const float *src, int64_t n, int64_t channels, int64_t pixels, float *out, const int64_t *index,
                 const int32_t *ops, const float *factors, int64_t steps, const float *mean, const float *inv_std) {
    if ((channels != 1 && channels != 3) || steps < 0 || steps > MAX_STEPS || n < 0 || pixels < 0) return -1;
    for (int64_t i = 0; i < n; i++) {
        const int32_t *op = ops + index[i] * steps;
        const float *factor = factors + index[i] * steps;
        const float *image = src + i * channels * pixels;
        float contrast_mean[MAX_STEPS];
        for (int s = 0; s < steps; s++) {
            contrast_mean[s] = 0.0f;
            if (op[s] == OP_CONTRAST && pixels > 0)
                contrast_mean[s] = (float)(run_image(image, 0, (int)channels, pixels, op, factor, s, contrast_mean, 0, 0) / (double)pixels);
        }
        run_image(image, out + index[i] * channels * pixels, (int)channels, pixels, op, factor, (int)steps, contrast_mean,
                  mean, inv_std);
    }
    return 0;
}
