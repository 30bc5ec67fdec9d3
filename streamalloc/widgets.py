"""Widgets: controls over a recorded grid of settings, the same in live and in replay.

A lesson measures a grid of settings once with `lesson.measure` (live: now; replay: the recording comes
back), and an Explorer lets the learner move over it: one control per setting, and the lesson's plot for the
chosen one.

    explorer = sa.widgets.Explorer(
        grid,                                      # lesson.measure's Result, or a dict {setting: data}
        plot_script,                               # plot(*setting, data=..., label=...) -> a figure
        {"threshold": [("0", 0), ("64 MiB", 64 << 20)],   # numbers: a slider over (label, value) pairs or values
         "trace": ["training", "pipeline"],                # names (not numbers): a dropdown
         "trim to 0 at the end": [False, True]},           # [False, True]: a checkbox
        default=(0, "training", True),
        key=lambda t, name, trim: f"{t}|{name}|{int(trim)}",    # setting -> the grid's key (JSON keys are strings)
        run=script, live=lesson.live, run_label=lesson.label)  # live: "run it now on this GPU"
    explorer                                       # the last line of a cell shows it

The explorer draws the default setting when it is made (so a setting missing from the grid, or a plot
that fails, raises in the cell). Shown, it is two outputs: first the plot, an ordinary image output that
every front end shows (nbval, papermill, nbconvert, a notebook opened without its kernel, and a widget front
end that cannot draw this ipywidgets' widgets); then the controls, whose last row (an HTML widget) says what a
redraw printed, or its error. Moving a control redraws the plot in place (IPython's update_display).

No ipywidgets Output widget: widgetsnbextension 3.6.10 (classic Notebook 6.5, Colab's closest front end) cannot
create its model at all ("Could not create a model ... _deserialize_state is not a function": the Output model
class that front end builds lacks the static method every model needs), and that failure, in the notebook's queue
of kernel messages, sometimes took the controls' box down with it (issue 32: a cell run by "Run all" showed the
plot but no controls, 2 CI runs of 5, whether the Output sat inside the box or beside it). Without ipywidgets it is
only the image, with a note.

Importing this module is cheap: ipywidgets is imported when an explorer is made, not here.
"""
from __future__ import annotations

import base64
import contextlib
import html
import inspect
import io
import traceback
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

RUN_NOW = "run it now on this GPU"
READOUT_MARGIN = "0 2em 0 0.5em"  # a slider's readout: a little room before it, a gap after it (top right bottom left)
RUN_NOW_OFF = "run it now (needs a GPU)"


def _ipywidgets():
    """The ipywidgets module, or None where it is not installed."""
    try:
        import ipywidgets
    except ImportError:
        return None
    return ipywidgets


def _ipython():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _options(spec) -> list[tuple[str, object]]:
    """A control's options as (label, value) pairs: values alone are labelled with str(value)."""
    pairs = [o if isinstance(o, tuple) and len(o) == 2 else (str(o), o) for o in spec]
    if not pairs:
        raise ValueError("a control needs at least one option")
    return pairs


def _is_switch(pairs) -> bool:
    return all(isinstance(v, bool) for _, v in pairs)


def _is_choice(pairs) -> bool:
    """Named choices (a trace, an allocator: values that are not numbers) have no order for a slider to show, and
    their names are long: a dropdown lists each whole."""
    return not all(isinstance(v, (int, float)) for _, v in pairs)


def render(fig: Figure) -> dict:
    """A figure as the display_data output a notebook stores: as the inline backend shows it, else a PNG."""
    ip = _ipython()
    if ip is not None and getattr(ip, "display_formatter", None) is not None:
        data, metadata = ip.display_formatter.format(fig)
        if "image/png" in data:
            png = data["image/png"]
            data = {**data, "image/png": base64.b64encode(png).decode("ascii") if isinstance(png, bytes) else png}
            return {"output_type": "display_data", "data": data, "metadata": metadata}
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return {"output_type": "display_data", "metadata": {},
            "data": {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"), "text/plain": repr(fig)}}


class Explorer:
    """Controls over a grid of settings, and the plot(*setting) of the chosen one.

    grid: {key(*setting): data}, or a lesson Result whose .data is that dict (its .label is then the
        default label). controls: {description: options}, in the order of plot's arguments; options are
        values or (label, value) pairs; a control whose values are all bools is a checkbox, one whose values are
        numbers a slider (with the chosen label beside it), any other (names) a dropdown.
    plot(*setting, data=..., label=...) draws one setting and returns its figure (or leaves it current).
    run(*setting) -> data measures one setting now: offered as a checkbox, enabled only when live.
    """

    def __init__(self, grid, plot: Callable, controls: Mapping[str, Sequence], *, default: Sequence | None = None,
                 key: Callable | None = None, label: str | None = None, run: Callable | None = None,
                 live: bool = False, run_label: str = "live"):
        self.grid = grid.data if hasattr(grid, "data") else grid
        self.label = label if label is not None else getattr(grid, "label", "")
        self.plot, self.key, self.run, self.live, self.run_label = plot, key, run, live, run_label
        self.options = {name: _options(spec) for name, spec in controls.items()}
        self.default = tuple(default) if default is not None else tuple(p[0][1] for p in self.options.values())
        if len(self.default) != len(self.options):
            raise ValueError(f"default {self.default} names {len(self.default)} values for {len(self.options)} controls")
        for (name, pairs), value in zip(self.options.items(), self.default):
            if value not in [v for _, v in pairs]:
                raise ValueError(f"the default {name} {value!r} is not one of its options")

        self.controls, self.readouts, self.now, self.said, self.box = {}, {}, None, None, None
        self.draws = 0  # how many times plot was called: a test's hook
        self.handles = []  # the plot's displays (a DisplayHandle each): a redraw updates them in place
        self._widgets = _ipywidgets()
        if self._widgets is not None:
            self._build(self._widgets)
        self.shown = self.draw(self.default)  # the default, once: raises here if it cannot be drawn
        if self.box is None:
            print(f"ipywidgets is not installed: below is the default setting; {self._call_hint()} for another one")

    # -- the widgets -----------------------------------------------------------------------
    def _build(self, w):
        wide = {"description_width": "initial"}  # a description is never cut off
        for (name, pairs), value in zip(self.options.items(), self.default):
            if _is_switch(pairs):
                self.controls[name] = w.Checkbox(value=value, description=name, style=wide, indent=False)
            elif _is_choice(pairs):  # wide enough for its description and its longest name
                width = f"{len(name) + max(len(label) for label, _ in pairs) + 8}ch"
                self.controls[name] = w.Dropdown(options=pairs, value=value, description=name, style=wide,
                                                 layout=w.Layout(width=width))
            else:  # the slider's own readout has a fixed width that cuts "UINT64_MAX": a Label beside it shows the choice,
                # as wide as the longest, and a gap after it, so that it never runs into the next slider's name
                self.controls[name] = w.SelectionSlider(options=pairs, value=value, description=name, style=wide,
                                                        readout=False, continuous_update=False)
                width = f"{max(len(label) for label, _ in pairs) + 1}ch"
                self.readouts[name] = w.Label(value=self._label(name), layout=w.Layout(min_width=width,
                                                                                       margin=READOUT_MARGIN))
                self.controls[name].observe(self._readout(name), names="value")
        if self.run is not None:
            self.now = w.Checkbox(value=False, disabled=not self.live, description=RUN_NOW if self.live else RUN_NOW_OFF,
                                  style=wide, indent=False)
        self.said = w.HTML(value="")  # what a redraw printed, or its error (an HTML widget: see the module's notes)
        pickers = [w.HBox([c, self.readouts[n]]) if n in self.readouts else c
                   for n, c in self.controls.items() if not isinstance(c, w.Checkbox)]  # sliders and dropdowns
        switches = [c for c in self.controls.values() if isinstance(c, w.Checkbox)] + ([self.now] if self.now else [])
        rows = [w.HBox(row) for row in (pickers, switches) if row]
        self.box = w.VBox(rows + [self.said])
        for c in list(self.controls.values()) + ([self.now] if self.now else []):
            c.observe(self.redraw, names="value")

    def _label(self, name) -> str:
        """The chosen option's label, from the options themselves (a slider's .label lags in some versions)."""
        return self.options[name][self.controls[name].index][0]

    def _readout(self, name):
        def show(change):
            self.readouts[name].value = self._label(name)
        return show

    @property
    def setting(self) -> tuple:
        """The chosen values, in the order of the controls (the default where there are no widgets)."""
        if not self.controls:
            return self.default
        return tuple(c.value for c in self.controls.values())

    # -- drawing ---------------------------------------------------------------------------
    def data(self, setting: Sequence) -> tuple[object, str]:
        """The data and label for one setting: measured now (live, box ticked) or from the grid."""
        if self.now is not None and self.now.value and self.live:
            return self.run(*setting), self.run_label
        k = self.key(*setting) if self.key else tuple(setting)
        if k not in self.grid:
            described = ", ".join(f"{n} {v!r}" for n, v in zip(self.options, setting))
            raise LookupError(f"the recorded grid holds nothing for {described} (key {k!r})")
        return self.grid[k], self.label

    def draw(self, setting: Sequence) -> dict:
        """Plot one setting and return the figure as a display_data output; the figure is closed."""
        before = set(plt.get_fignums())
        data, label = self.data(setting)
        self.draws += 1
        try:
            result = self.plot(*setting, data=data, label=label)
            fig = result if isinstance(result, Figure) else getattr(result, "figure", None)
            new = [n for n in plt.get_fignums() if n not in before]
            if not isinstance(fig, Figure):
                if not new:
                    raise ValueError(f"{getattr(self.plot, '__name__', 'plot')} drew no figure")
                fig = plt.figure(new[-1])
            return render(fig)
        finally:
            for n in set(plt.get_fignums()) - before:  # never left for the inline backend to show again
                plt.close(n)

    @property
    def message(self) -> str:
        """What the last redraw printed, or its error, as the controls' last row shows it (plain text)."""
        return self._message

    _message = ""

    def _say(self, text: str, error: bool = False):
        self._message = text
        if self.said is not None:
            colour = "#b00020" if error else "inherit"
            self.said.value = (f'<pre style="margin:0;white-space:pre-wrap;color:{colour}">{html.escape(text)}</pre>'
                               if text else "")

    def redraw(self, *_):
        """Draw the chosen setting in place of the plot shown; what the plot printed, or its error, shows under
        the controls (an error leaves the last good plot)."""
        text = io.StringIO()
        try:
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
                shown = self.draw(self.setting)
        except Exception:
            self._say(text.getvalue() + traceback.format_exc(), error=True)
            return
        self.shown = shown
        self._say(text.getvalue())
        for handle in self.handles:
            handle.update(shown["data"], metadata=shown["metadata"], raw=True)

    # -- display ---------------------------------------------------------------------------
    def _call_hint(self) -> str:
        """'call plot_script(threshold, size_mib, trim)': how to draw another setting by hand."""
        try:
            names = list(inspect.signature(self.plot).parameters)[:len(self.options)]
        except (TypeError, ValueError):
            names = ["..."]
        return f"call {getattr(self.plot, '__name__', 'the plot function')}({', '.join(names)})"

    def _repr_mimebundle_(self, include=None, exclude=None):
        """The plot shown now, as an image (what a formatter that does not display gets)."""
        return self.shown["data"], self.shown["metadata"]

    def _ipython_display_(self):
        """The plot as an ordinary output first (every front end shows it), then the controls."""
        from IPython.display import display

        handle = display(self.shown["data"], metadata=self.shown["metadata"], raw=True, display_id=True)
        if handle is not None:
            self.handles.append(handle)
        if self.box is not None:
            display(self.box)

    def show(self):
        """Display the explorer (the same as leaving it as the last line of a cell)."""
        from IPython.display import display

        display(self)
