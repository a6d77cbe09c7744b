// The SVG timeline of a replayed step (plan/sim.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/sim.h"
#include "plan/strbuf.h"

static const char *lane_title[ENG_SPAN_LANES] = {"compute", "copy-in", "copy-out", "NVMe", "optimizer", "ranks"};

// Fill colour by what a span is.
static const char *color(const eng_plan_span *x) {
  switch (x->what[0]) {
  case 'F': return "#4e79a7";
  case 'B': return "#59a14f";
  case 'R': return "#f28e2b";
  case 'H': return "#b07aa1";
  case 'w': return "#bab0ac";
  case 'g': return "#9c755f";
  case 'b': return "#e15759";
  default: return "#76b7b2";
  }
}

int eng_plan_svg(const eng_plan *p, const eng_plan_sim *s, char **out, eng_err *e) {
  const double width = 1400, left = 90, lane_h = 34, top = 56;
  const double scale = (width - left - 20) / (s->step_time > 0 ? s->step_time : 1);
  const double height = top + ENG_SPAN_LANES * lane_h + 40;
  eng_sb b = {0};
  eng_sb_put(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"11\">\n",
      width, height);
  eng_sb_put(&b, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  eng_sb_put(&b, "<text x=\"10\" y=\"18\" font-size=\"13\">%s on %s: batch %d x %d, micro-batch %d; step %.3f s, %.0f tokens/s; "
          "exposed %.3f s, recompute %.3f s (%s%s)</text>\n",
      p->model, p->profile, p->batch, p->seq_len, p->micro_batch, s->step_time,
      p->batch * (double)p->seq_len / s->step_time, s->t_exposed, s->t_recompute, p->method,
      p->optimal ? ", optimal" : "");
  eng_sb_put(&b, "<text x=\"10\" y=\"36\">peak activation bytes: device %.3f GiB, host %.3f GiB, NVMe %.3f GiB. "
          "F forward, H head, R recompute, B backward; w weights, g gradients, b boundary</text>\n",
      s->peak_dev / 1073741824.0, s->peak_host / 1073741824.0, s->peak_nvme / 1073741824.0);
  for (int l = 0; l < ENG_SPAN_LANES; l++) {
    double y = top + l * lane_h;
    eng_sb_put(&b, "<text x=\"10\" y=\"%.1f\">%s</text>\n", y + lane_h / 2 + 4, lane_title[l]);
    eng_sb_put(&b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left, y + lane_h, width - 20,
        y + lane_h);
  }
  for (int i = 0; i < s->n_span; i++) {
    const eng_plan_span *x = &s->span[i];
    double x0 = left + x->t0 * scale, w = fmax((x->t1 - x->t0) * scale, 0.5), y = top + x->lane * lane_h + 3;
    eng_sb_put(&b, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\" stroke-width=\"0.3\">"
            "<title>%s %.4f-%.4f s</title></rect>\n",
        x0, y, w, lane_h - 6, color(x), x->what, x->t0, x->t1);
    if (w > 7.0 * (double)strlen(x->what))
      eng_sb_put(&b, "<text x=\"%.2f\" y=\"%.1f\" fill=\"white\">%s</text>\n", x0 + 2, y + lane_h / 2 + 1, x->what);
  }
  // A time axis with about ten ticks at round values.
  double step = pow(10, floor(log10(s->step_time > 0 ? s->step_time : 1)));
  if (s->step_time / step < 3) step /= 5;
  else if (s->step_time / step < 6) step /= 2;
  double ya = top + ENG_SPAN_LANES * lane_h + 16;
  for (double t = 0; t <= s->step_time * 1.0001; t += step)
    eng_sb_put(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g s</text>\n", left + t * scale, ya, t);
  eng_sb_put(&b, "</svg>\n");
  if (b.oom) {
    free(b.s);
    return eng_err_set(e, ENG_ENOMEM, "plan svg: out of memory");
  }
  *out = b.s;
  return 0;
}
