"""Write the Problem 4 figures (SVG) into notes/figures/: python notes/make_figures.py"""
from pathlib import Path

from minitorch import pipeline, schedules

FIGURES = {
    "gpipe_k4_m8.svg": ("GPipe, K = 4, M = 8", schedules.gpipe(4, 8), {}),
    "1f1b_k4_m8.svg": ("1F1B, K = 4, M = 8", pipeline.one_f_one_b(4, 8), {}),
    "interleaved_k4_m8_v2.svg": ("Interleaved 1F1B, K = 4, M = 8, v = 2", pipeline.interleaved_one_f_one_b(4, 8, 2), {}),
    "zb_h1_k4_m8.svg": ("ZB-H1, K = 4, M = 8, F = I = W = 1", schedules.zb_h1(4, 8), {"t_w": 1.0}),
}

if __name__ == "__main__":
    folder = Path(__file__).parent / "figures"
    folder.mkdir(exist_ok=True)
    for name, (title, schedule, times) in FIGURES.items():
        timeline = schedules.simulate(schedule, 1.0, 2.0, **times)
        (folder / name).write_text(schedules.render_svg(timeline, title=title), encoding="utf-8")
        print(f"wrote {folder / name}")
