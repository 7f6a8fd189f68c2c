"""The home page's "run the story" button: the same story as `manage.py story`."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from demo.shop.access import chaos_required
from demo.shop.story import StoryRunning, StoryUnavailable, story_run

# The button runs inside a web request: keep the waits for background work well
# inside gunicorn's 60 s worker timeout (the provider's scripted delay comes first).
WEB_WAIT_S = 15.0


@chaos_required
def run(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("storefront:home")
    try:
        report = story_run(wait_s=WEB_WAIT_S)
    except StoryRunning as error:
        # A second click, or another browser: the first story goes on, this one never began.
        return render(request, "storefront/story.html", {"error": str(error)}, status=409)
    except StoryUnavailable as error:
        return render(request, "storefront/story.html", {"error": str(error)})
    return render(request, "storefront/story.html", {"report": report})
