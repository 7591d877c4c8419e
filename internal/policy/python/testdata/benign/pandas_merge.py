# result: ['Bob', 'Ann', 'Dee']
import pandas as pd

customers = pd.DataFrame({"id": [1, 2, 3, 4], "name": ["Ann", "Bob", "Cid", "Dee"]})
orders = pd.DataFrame({"order": [10, 11, 12, 13, 14], "customer_id": [1, 2, 2, 4, 5],
                       "amount": [9.5, 20.0, 3.25, 7.0, 1.0]})
merged = orders.merge(customers, left_on="customer_id", right_on="id", how="left")
print(merged)
inner = orders.merge(customers, left_on="customer_id", right_on="id")
per_customer = inner.groupby("name")["amount"].sum().sort_values(ascending=False)
print(per_customer)
per_customer.index.tolist()
