# result: "Python's textwrap module..."
import textwrap

text = ("Python's textwrap module formats paragraphs so that they fit in a given width, "
        "which is handy for reports printed to a terminal.")
print(textwrap.fill(text, width=40))
print(textwrap.indent("a\nb", "  > "))
print(textwrap.dedent("""
    indented
      more
""").strip())
textwrap.shorten(text, width=30, placeholder="...")
