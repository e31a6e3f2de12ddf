// SsdDecoder.java: written by edgeship for Android bundles of detectors deployed as raw SSD head outputs.
//
// The Java port of postprocess/postprocess.py (decode_ssd), tested against it with javac/java 17 on
// random and SSDLite head outputs: same detections, labels and order; boxes and scores within
// float32 rounding (exp is correctly rounded here, numpy's float32 exp is up to 2 ulp off it).
// Java 8, java.util/java.io/java.nio only. Put it under src/main/java/ai/edgeship/.
package ai.edgeship;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.Charset;
import java.util.Arrays;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Detections of one image from SSD head outputs (box regression [A, 4], class logits [A, C]), the
 * way torchvision's SSD.postprocess_detections and edgeship's postprocess.py make them:
 *
 * <ol>
 * <li>softmax over the classes of each anchor;
 * <li>boxes decoded from the anchors (offsets divided by the box coder weights, dw and dh clamped
 *     to log(1000 / 16)), clipped to the image when its size is given;
 * <li>per class except the background: anchors scoring strictly above the score threshold, of
 *     which the {@code candidatesPerClass} best;
 * <li>non-maximum suppression within each class (a box is dropped when its IoU with a better box of
 *     the same class is strictly above the IoU threshold);
 * <li>the {@code maxDetections} best of what is left, best first.
 * </ol>
 *
 * <p>Ties (equal scores) go to the lower index: the anchor with the lower index within a class, the
 * earlier candidate across classes (candidates are ordered by class, then by score). Arithmetic is
 * float32 in postprocess.py's order. The settings are decode.json's "arguments". An instance holds
 * no per-image state: decode() may be called from several threads.
 */
public final class SsdDecoder {
    /** {@code background} value when no class is the background (decode.json: null). */
    public static final int NO_BACKGROUND = -1;
    /** torchvision's batched_nms on CPU: more candidates than this -> NMS class by class. */
    static final int VANILLA_NMS_ABOVE = 1000;
    /** torchvision BoxCoder: the largest dw, dh passed to exp, as float32. */
    static final float BBOX_XFORM_CLIP = (float) Math.log(1000.0 / 16);

    /** One detection: an xyxy box in input pixels, its score (softmax probability) and class index. */
    public static final class Detection {
        public final float x1, y1, x2, y2, score;
        public final int label;

        public Detection(float x1, float y1, float x2, float y2, float score, int label) {
            this.x1 = x1;
            this.y1 = y1;
            this.x2 = x2;
            this.y2 = y2;
            this.score = score;
            this.label = label;
        }

        @Override
        public String toString() {
            return "Detection(label=" + label + ", score=" + score + ", box=[" + x1 + ", " + y1 + ", " + x2 + ", "
                    + y2 + "])";
        }
    }

    private final float[] anchors;  // [A * 4] xyxy
    private final int numAnchors;
    private final float wx, wy, ww, wh;
    private final float scoreThreshold;
    private final double iouThreshold;  // IoUs are float32, compared in float64 as torchvision's CPU kernel does
    private final int candidatesPerClass, maxDetections, background;
    private final int[] imageSize;  // {height, width}, or null: boxes are not clipped

    /**
     * A decoder for one model: its anchors and decode.json's "arguments".
     *
     * @param anchors            [A][4] xyxy anchors in input pixels (postprocess/anchors.npy, see
     *                           {@link #readAnchorsNpy})
     * @param weights            box coder weights (wx, wy, ww, wh), e.g. {10, 10, 5, 5}
     * @param scoreThreshold     a class score must be strictly above it (compared as float32)
     * @param iouThreshold       NMS drops a box whose IoU with a better one is strictly above it
     * @param candidatesPerClass best-scoring anchors per class kept before NMS
     * @param maxDetections      detections kept after NMS
     * @param background         class index left out, or {@link #NO_BACKGROUND}
     * @param imageSize          {height, width} of the model input to clip boxes to, or null (no clipping)
     */
    public SsdDecoder(float[][] anchors, double[] weights, double scoreThreshold, double iouThreshold,
                      int candidatesPerClass, int maxDetections, int background, int[] imageSize) {
        if (weights == null || weights.length != 4) {
            throw new IllegalArgumentException("weights: expected 4 numbers (wx, wy, ww, wh), got "
                    + Arrays.toString(weights));
        }
        if (candidatesPerClass < 1 || maxDetections < 1) {
            throw new IllegalArgumentException("candidatesPerClass " + candidatesPerClass + " and maxDetections "
                    + maxDetections + ": both must be at least 1");
        }
        if (background < NO_BACKGROUND) {
            throw new IllegalArgumentException("background " + background
                    + ": expected a class index (0 or more) or NO_BACKGROUND (-1)");
        }
        if (imageSize != null && imageSize.length != 2) {
            throw new IllegalArgumentException("imageSize: expected {height, width} or null, got "
                    + Arrays.toString(imageSize));
        }
        this.numAnchors = anchors.length;
        this.anchors = new float[numAnchors * 4];
        for (int i = 0; i < numAnchors; i++) {
            if (anchors[i].length != 4) {
                throw new IllegalArgumentException("anchors[" + i + "]: expected 4 numbers (x1, y1, x2, y2), got "
                        + anchors[i].length);
            }
            System.arraycopy(anchors[i], 0, this.anchors, 4 * i, 4);
        }
        this.wx = (float) weights[0];
        this.wy = (float) weights[1];
        this.ww = (float) weights[2];
        this.wh = (float) weights[3];
        this.scoreThreshold = (float) scoreThreshold;
        this.iouThreshold = iouThreshold;
        this.candidatesPerClass = candidatesPerClass;
        this.maxDetections = maxDetections;
        this.background = background;
        this.imageSize = imageSize == null ? null : imageSize.clone();
    }

    /**
     * Detections of one image, best first.
     *
     * @param boxRegression the box regression output of one image, [A * 4] (dx, dy, dw, dh per anchor)
     * @param classLogits   the class logits output of one image, [A * C]
     */
    public Detection[] decode(float[] boxRegression, float[] classLogits) {
        int a = numAnchors;
        if (boxRegression.length != 4 * a || (a == 0 ? classLogits.length != 0 : classLogits.length % a != 0)) {
            throw new IllegalArgumentException("box regression of " + boxRegression.length + " and class logits of "
                    + classLogits.length + " numbers do not fit " + a + " anchors: expected " + a
                    + " * 4 and " + a + " * classes");
        }
        if (a == 0 || classLogits.length == 0) {
            return new Detection[0];
        }
        int c = classLogits.length / a;
        float[] scores = softmax(classLogits, a, c);
        float[] boxes = decodeBoxes(boxRegression);
        if (imageSize != null) {
            clipBoxes(boxes);
        }
        Candidates cand = candidates(scores, boxes, a, c);
        int[] keep = batchedNms(cand.boxes, cand.scores, cand.labels, cand.count);
        Detection[] out = new Detection[Math.min(keep.length, maxDetections)];
        for (int k = 0; k < out.length; k++) {
            int i = keep[k];
            out[k] = new Detection(cand.boxes[4 * i], cand.boxes[4 * i + 1], cand.boxes[4 * i + 2],
                    cand.boxes[4 * i + 3], cand.scores[i], cand.labels[i]);
        }
        return out;
    }

    /** Softmax over the C classes of each of the A anchors, float32, the maximum subtracted first. */
    static float[] softmax(float[] logits, int a, int c) {
        float[] out = new float[a * c];
        float[] shifted = new float[c];
        for (int i = 0; i < a; i++) {
            int row = i * c;
            float max = logits[row];
            for (int j = 1; j < c; j++) {
                max = Math.max(max, logits[row + j]);
            }
            for (int j = 0; j < c; j++) {
                shifted[j] = (float) Math.exp(logits[row + j] - max);
            }
            float sum = pairwiseSum(shifted, 0, c);
            for (int j = 0; j < c; j++) {
                out[row + j] = shifted[j] / sum;
            }
        }
        return out;
    }

    /**
     * numpy's float32 sum of a[start, start + n): its pairwise summation with 8 accumulators, so the
     * softmax denominator rounds as postprocess.py's does.
     */
    static float pairwiseSum(float[] a, int start, int n) {
        if (n < 8) {
            float res = 0f;
            for (int i = 0; i < n; i++) {
                res += a[start + i];
            }
            return res;
        }
        if (n <= 128) {
            float[] r = new float[8];
            System.arraycopy(a, start, r, 0, 8);
            int i;
            for (i = 8; i < n - (n % 8); i += 8) {
                for (int j = 0; j < 8; j++) {
                    r[j] += a[start + i + j];
                }
            }
            float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
            for (; i < n; i++) {
                res += a[start + i];
            }
            return res;
        }
        int half = n / 2;
        half -= half % 8;
        return pairwiseSum(a, start, half) + pairwiseSum(a, start + half, n - half);
    }

    /** Anchor offsets (dx, dy, dw, dh) applied to the xyxy anchors: xyxy boxes [A * 4], float32. */
    float[] decodeBoxes(float[] rel) {
        float[] out = new float[4 * numAnchors];
        for (int i = 0; i < numAnchors; i++) {
            int o = 4 * i;
            float width = anchors[o + 2] - anchors[o];
            float height = anchors[o + 3] - anchors[o + 1];
            float ctrX = anchors[o] + 0.5f * width;
            float ctrY = anchors[o + 1] + 0.5f * height;
            float dx = rel[o] / wx;
            float dy = rel[o + 1] / wy;
            float dw = Math.min(rel[o + 2] / ww, BBOX_XFORM_CLIP);
            float dh = Math.min(rel[o + 3] / wh, BBOX_XFORM_CLIP);
            float predCtrX = dx * width + ctrX;
            float predCtrY = dy * height + ctrY;
            float halfW = 0.5f * ((float) Math.exp(dw) * width);
            float halfH = 0.5f * ((float) Math.exp(dh) * height);
            out[o] = predCtrX - halfW;
            out[o + 1] = predCtrY - halfH;
            out[o + 2] = predCtrX + halfW;
            out[o + 3] = predCtrY + halfH;
        }
        return out;
    }

    /** x into [0, width], y into [0, height], in place. */
    void clipBoxes(float[] boxes) {
        float height = imageSize[0];
        float width = imageSize[1];
        for (int o = 0; o < boxes.length; o += 4) {
            boxes[o] = Math.min(Math.max(boxes[o], 0f), width);
            boxes[o + 1] = Math.min(Math.max(boxes[o + 1], 0f), height);
            boxes[o + 2] = Math.min(Math.max(boxes[o + 2], 0f), width);
            boxes[o + 3] = Math.min(Math.max(boxes[o + 3], 0f), height);
        }
    }

    /** The candidates before NMS: class by class (ascending), best first within a class. */
    static final class Candidates {
        float[] boxes;
        float[] scores;
        int[] labels;
        int count;
    }

    /** Per class but the background: anchors scoring above the threshold, the candidatesPerClass best. */
    Candidates candidates(float[] scores, float[] boxes, int a, int c) {
        int[][] chosen = new int[c][];
        int total = 0;
        int[] above = new int[a];
        float[] aboveScores = new float[a];
        for (int label = 0; label < c; label++) {
            if (label == background) {
                continue;
            }
            int n = 0;
            for (int i = 0; i < a; i++) {
                float s = scores[i * c + label];
                if (s > scoreThreshold) {
                    above[n] = i;
                    aboveScores[n++] = s;
                }
            }
            int[] best = byScore(above, aboveScores, n);
            chosen[label] = best.length > candidatesPerClass ? Arrays.copyOf(best, candidatesPerClass) : best;
            total += chosen[label].length;
        }
        Candidates cand = new Candidates();
        cand.boxes = new float[4 * total];
        cand.scores = new float[total];
        cand.labels = new int[total];
        int k = 0;
        for (int label = 0; label < c; label++) {
            if (chosen[label] == null) {
                continue;
            }
            for (int i : chosen[label]) {
                System.arraycopy(boxes, 4 * i, cand.boxes, 4 * k, 4);
                cand.scores[k] = scores[i * c + label];
                cand.labels[k++] = label;
            }
        }
        cand.count = total;
        return cand;
    }

    /**
     * ids[0..n) ordered by descending score (scores[k] is ids[k]'s), ties by ascending id. Scores
     * are softmax outputs (0 to 1), whose float bits order as the floats do, so one sort of
     * (score bits, id) keys gives that order.
     */
    static int[] byScore(int[] ids, float[] scores, int n) {
        long[] keys = new long[n];
        for (int k = 0; k < n; k++) {
            long descending = Integer.MAX_VALUE - Float.floatToIntBits(scores[k]);
            keys[k] = (descending << 32) | ids[k];
        }
        Arrays.sort(keys);
        int[] out = new int[n];
        for (int k = 0; k < n; k++) {
            out[k] = (int) keys[k];  // the low 32 bits: the id
        }
        return out;
    }

    /**
     * NMS within each label: the kept candidates, best first (ties: lower index first). As
     * torchvision and postprocess.py: up to VANILLA_NMS_ABOVE candidates, one pass over boxes
     * shifted apart by label (label * (largest coordinate + 1), in float32, so the IoUs round the
     * same); beyond that, NMS class by class.
     */
    int[] batchedNms(float[] boxes, float[] scores, int[] labels, int n) {
        if (n == 0) {
            return new int[0];
        }
        if (n <= VANILLA_NMS_ABOVE) {
            float max = boxes[0];
            for (int k = 1; k < 4 * n; k++) {
                max = Math.max(max, boxes[k]);
            }
            float step = max + 1f;
            float[] shifted = new float[4 * n];
            for (int k = 0; k < 4 * n; k++) {
                shifted[k] = boxes[k] + (float) labels[k / 4] * step;
            }
            return nms(shifted, scores, range(0, n));
        }
        boolean[] kept = new boolean[n];
        int count = 0;
        for (int start = 0; start < n; ) {  // candidates are grouped by label, labels ascending
            int end = start;
            while (end < n && labels[end] == labels[start]) {
                end++;
            }
            for (int i : nms(boxes, scores, range(start, end))) {
                kept[i] = true;
                count++;
            }
            start = end;
        }
        int[] ids = new int[count];
        float[] keptScores = new float[count];
        for (int i = 0, k = 0; i < n; i++) {
            if (kept[i]) {
                ids[k] = i;
                keptScores[k++] = scores[i];
            }
        }
        return byScore(ids, keptScores, count);
    }

    /**
     * Greedy NMS over the candidates {@code members}: the kept ones in visiting order (descending score,
     * ties: lower index first). Each one not yet suppressed is kept and suppresses every later box
     * whose IoU with it (float32) is strictly above the threshold; zero union never suppresses.
     */
    int[] nms(float[] boxes, float[] scores, int[] members) {
        int m = members.length;
        float[] memberScores = new float[m];
        for (int k = 0; k < m; k++) {
            memberScores[k] = scores[members[k]];
        }
        int[] order = byScore(members, memberScores, m);
        float[] areas = new float[m];
        for (int p = 0; p < m; p++) {
            int o = 4 * order[p];
            areas[p] = (boxes[o + 2] - boxes[o]) * (boxes[o + 3] - boxes[o + 1]);
        }
        boolean[] suppressed = new boolean[m];
        int[] keep = new int[m];
        int kept = 0;
        for (int p = 0; p < m; p++) {
            if (suppressed[p]) {
                continue;
            }
            keep[kept++] = order[p];
            int i = 4 * order[p];
            for (int q = p + 1; q < m; q++) {
                if (suppressed[q]) {
                    continue;
                }
                int j = 4 * order[q];
                float w = Math.max(0f, Math.min(boxes[i + 2], boxes[j + 2]) - Math.max(boxes[i], boxes[j]));
                float h = Math.max(0f, Math.min(boxes[i + 3], boxes[j + 3]) - Math.max(boxes[i + 1], boxes[j + 1]));
                float inter = w * h;
                float iou = inter / (areas[p] + areas[q] - inter);
                if ((double) iou > iouThreshold) {  // NaN (zero union) compares false
                    suppressed[q] = true;
                }
            }
        }
        return Arrays.copyOf(keep, kept);
    }

    private static int[] range(int start, int end) {
        int[] out = new int[end - start];
        for (int k = 0; k < out.length; k++) {
            out[k] = start + k;
        }
        return out;
    }

    private static final Pattern DESCR = Pattern.compile("'descr'\\s*:\\s*'([^']*)'");
    private static final Pattern FORTRAN = Pattern.compile("'fortran_order'\\s*:\\s*(True|False)");
    private static final Pattern SHAPE = Pattern.compile("'shape'\\s*:\\s*\\(([^)]*)\\)");

    /**
     * The anchors of an .npy file (postprocess/anchors.npy): a little-endian float32 [A, 4] array,
     * .npy format version 1, 2 or 3, C or Fortran order. The stream is read, not closed.
     *
     * @throws IOException when the stream is not such a file (the message says what it holds)
     */
    public static float[][] readAnchorsNpy(InputStream stream) throws IOException {
        DataInputStream in = new DataInputStream(stream);
        byte[] magic = new byte[6];
        in.readFully(magic);
        if ((magic[0] & 0xff) != 0x93 || !"NUMPY".equals(new String(magic, 1, 5, Charset.forName("US-ASCII")))) {
            throw new IOException("anchors: not an .npy file (it does not start with \\x93NUMPY)");
        }
        int major = in.readUnsignedByte();
        in.readUnsignedByte();  // minor version
        if (major < 1 || major > 3) {
            throw new IOException("anchors: .npy format version " + major + ", expected 1, 2 or 3");
        }
        byte[] size = new byte[major == 1 ? 2 : 4];  // the header's length, little-endian
        in.readFully(size);
        long headerLength = 0;
        for (int k = size.length - 1; k >= 0; k--) {
            headerLength = (headerLength << 8) | (size[k] & 0xff);
        }
        if (headerLength > 1 << 20) {
            throw new IOException("anchors: .npy header of " + headerLength + " bytes, expected a few hundred");
        }
        byte[] headerBytes = new byte[(int) headerLength];
        in.readFully(headerBytes);
        String header = new String(headerBytes, Charset.forName(major == 3 ? "UTF-8" : "ISO-8859-1"));
        String descr = find(DESCR, header, "descr");
        boolean fortran = "True".equals(find(FORTRAN, header, "fortran_order"));
        int[] shape = parseShape(find(SHAPE, header, "shape"));
        if (!"<f4".equals(descr)) {
            throw new IOException("anchors: dtype '" + descr + "', expected little-endian float32 ('<f4'); save "
                    + "them with numpy.save(path, anchors.astype('<f4'))");
        }
        if (shape.length != 2 || shape[1] != 4) {
            throw new IOException("anchors: shape " + Arrays.toString(shape) + ", expected [anchors, 4] (xyxy boxes)");
        }
        int a = shape[0];
        if (a < 0 || a > Integer.MAX_VALUE / 16) {
            throw new IOException("anchors: shape " + Arrays.toString(shape) + ": " + a + " anchors is not a count");
        }
        byte[] data = new byte[a * 4 * 4];
        in.readFully(data);
        float[] flat = new float[a * 4];
        ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(flat);
        float[][] anchors = new float[a][4];
        for (int i = 0; i < a; i++) {
            for (int j = 0; j < 4; j++) {
                anchors[i][j] = fortran ? flat[j * a + i] : flat[i * 4 + j];
            }
        }
        return anchors;
    }

    private static String find(Pattern pattern, String header, String key) throws IOException {
        Matcher m = pattern.matcher(header);
        if (!m.find()) {
            throw new IOException("anchors: the .npy header has no '" + key + "': " + header.trim());
        }
        return m.group(1);
    }

    private static int[] parseShape(String text) throws IOException {
        String[] parts = text.split(",");
        int n = 0;
        int[] shape = new int[parts.length];
        for (String part : parts) {
            if (!part.trim().isEmpty()) {
                try {
                    shape[n++] = Integer.parseInt(part.trim());
                } catch (NumberFormatException e) {
                    throw new IOException("anchors: .npy shape (" + text + ") is not a tuple of integers");
                }
            }
        }
        return Arrays.copyOf(shape, n);
    }
}
