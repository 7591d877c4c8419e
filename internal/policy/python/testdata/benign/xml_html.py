# result: ['B']
import html
import xml.etree.ElementTree as ET

doc = ET.fromstring("<library><book year='1999'><title>A</title></book><book year='2005'><title>B</title></book></library>")
titles = [b.findtext("title") for b in doc.iter("book") if int(b.get("year")) > 2000]
root = ET.Element("out")
ET.SubElement(root, "item", name="x").text = "1"
print(ET.tostring(root, encoding="unicode"), html.escape("<a & b>"))
titles
