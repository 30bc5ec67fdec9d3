"""google.colab.output: the widget manager switches and clear(). Colab's front end is the browser's; here they
only record what was asked (nothing draws)."""
custom_widget_manager = False


def enable_custom_widget_manager():
    global custom_widget_manager
    custom_widget_manager = True


def disable_custom_widget_manager():
    global custom_widget_manager
    custom_widget_manager = False


def clear(wait=False, output_tags=()):
    from IPython.display import clear_output

    clear_output(wait=wait)


def eval_js(script, ignore_result=False, timeout_sec=None):
    raise NotImplementedError("the Colab stand-in has no browser to run JavaScript in")
